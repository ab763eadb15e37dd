"""A continuous-batching engine driven by a K policy, step by step.

Each step, as vLLM V1 does it:

1. Waiting requests take free slots (up to the max batch size; in a closed
   loop, up to the concurrency). Prompts are prefilled in chunks under a
   token budget that reserves maxK + 1 tokens per decoding sequence.
2. The batch size is the number of scheduled sequences, prefills included
   (vLLM indexes ``dynamic_sd_lookup`` by ``len(num_scheduled_tokens)``);
   the policy's ``choose_k(batch_size)`` picks K for the whole batch.
3. The step costs what the cost model says for its verified and prefill
   tokens and the KV it reads.
4. Each decoding sequence draws one uniform; its accepted count is the
   largest n <= K with S_n > u (``acceptance.py``); it gains n + 1 tokens
   (capped by what it still has to say). A prefill that completes samples
   its first token.
5. Finished requests leave; ``observe(...)`` gets the step time and the
   per-position drafted/accepted counts with conditional denominators.

Uniforms are drawn for every slot every step so that two runs with the same
seed see the same random stream whatever K they choose. Everything here is
modelled time, not wall time.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from specdeploy.runtime.policy.base import KPolicy, StepRecord
from specdeploy.runtime.sim.acceptance import AcceptanceModel
from specdeploy.runtime.sim.costs import StepCost
from specdeploy.runtime.sim.workload import (
    ClosedLoop,
    OpenLoop,
    OscillatingLoop,
    RequestStream,
    Workload,
    arrivals,
)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

IDLE_TICK_S = 0.005
"""Open loop with nothing to run: time advances in ticks of this length."""


@dataclass(frozen=True)
class EngineConfig:
    """One simulated vLLM replica."""

    cost: StepCost
    acceptance: AcceptanceModel
    max_batch_size: int
    max_k: int
    max_batched_tokens: int = 8192
    speculative: bool = True
    """False is vanilla serving: no drafter configured, K is always 0."""

    def __post_init__(self) -> None:
        if self.max_batch_size < 1 or self.max_k < 0:
            raise ValueError("max_batch_size must be >= 1 and max_k >= 0")
        if self.max_batched_tokens < self.max_batch_size * (self.max_k + 1):
            raise ValueError("max_batched_tokens must fit a full batch of maxK+1 tokens")


@dataclass(frozen=True)
class StepTrace:
    """Per-step records of the counted steps (arrays of equal length)."""

    batch_size: IntArray
    k: IntArray
    seconds: FloatArray
    tokens: IntArray
    end_time: FloatArray
    decode_seqs: IntArray
    prefill_tokens: IntArray
    accepted: IntArray

    def windowed_throughput(self, window_s: float) -> tuple[FloatArray, FloatArray]:
        """(window end times, tokens/s) over consecutive windows of simulated time."""
        if self.end_time.size == 0:
            return np.zeros(0), np.zeros(0)
        start = float(self.end_time[0] - self.seconds[0])
        edges = np.arange(start, float(self.end_time[-1]) + window_s, window_s)
        which = np.searchsorted(edges, self.end_time, side="left") - 1
        which = np.clip(which, 0, edges.size - 2)
        sums = np.bincount(which, weights=self.tokens, minlength=edges.size - 1)
        rates: FloatArray = sums / window_s
        return edges[1:], rates


@dataclass(frozen=True)
class SimResult:
    """What a run produced, over the counted (post-warm-up) steps."""

    total_tokens: int
    sim_seconds: float
    steps: int
    mean_k: float
    k_changes_per_1000_steps: float
    mean_batch_size: float
    completed_requests: int
    mean_latency_s: float
    drafted: IntArray
    """Per position: drafts verified whose earlier positions were all accepted."""
    accepted: IntArray
    decode_seq_steps: int
    """Sum over steps of decoding sequences (denominator of observed AL)."""
    trace: StepTrace | None = None

    @property
    def tokens_per_s(self) -> float:
        return self.total_tokens / self.sim_seconds if self.sim_seconds > 0 else 0.0

    @property
    def mean_step_seconds(self) -> float:
        return self.sim_seconds / self.steps if self.steps else 0.0

    def acceptance_per_position(self) -> FloatArray:
        """Observed conditional acceptance (NaN where nothing was drafted)."""
        d = self.drafted.astype(np.float64)
        out: FloatArray = np.divide(self.accepted, d, out=np.full(d.shape, np.nan), where=d > 0)
        return out


class _Batch(NamedTuple):
    """One step's schedule."""

    decoding: BoolArray
    n_dec: int
    chunk: IntArray | None
    prefilling: BoolArray | None
    n_pre: int
    prefill_tokens: int
    pre_context: int
    pre_pairs: float


class _Slots:
    """Batch slots as parallel arrays (one entry per possible running request)."""

    def __init__(self, n: int) -> None:
        self.active = np.zeros(n, dtype=bool)
        self.prompt_left = np.zeros(n, dtype=np.int64)
        self.out_left = np.zeros(n, dtype=np.int64)
        self.ctx = np.zeros(n, dtype=np.int64)
        self.arrival = np.zeros(n, dtype=np.float64)

    def fill(self, idx: IntArray, prompt: IntArray, output: IntArray, arrival: FloatArray) -> None:
        self.active[idx] = True
        self.prompt_left[idx] = prompt
        self.out_left[idx] = output
        self.ctx[idx] = 0
        self.arrival[idx] = arrival


class _Recorder:
    """Accumulates counted steps; keeps the per-step arrays only when asked."""

    def __init__(self, max_k: int, trace: bool) -> None:
        self.trace = trace
        self.rows: list[tuple[int, int, float, int, float, int, int, int]] = []
        self.drafted = np.zeros(max_k, dtype=np.int64)
        self.accepted = np.zeros(max_k, dtype=np.int64)
        self.tokens = 0
        self.seconds = 0.0
        self.steps = 0
        self.k_sum = 0
        self.bs_sum = 0
        self.k_changes = 0
        self.last_k: int | None = None
        self.completed = 0
        self.latency_sum = 0.0
        self.decode_seq_steps = 0

    def step(
        self,
        bs: int,
        k: int,
        dt: float,
        tokens: int,
        end: float,
        decode: int,
        prefill: int,
        accepted: int,
    ) -> None:
        self.tokens += tokens
        self.seconds += dt
        self.steps += 1
        self.k_sum += k
        self.bs_sum += bs
        self.decode_seq_steps += decode
        if self.last_k is not None and k != self.last_k:
            self.k_changes += 1
        self.last_k = k
        if self.trace:
            self.rows.append((bs, k, dt, tokens, end, decode, prefill, accepted))

    def result(self) -> SimResult:
        trace = None
        if self.trace:
            cols = list(zip(*self.rows, strict=True)) if self.rows else [()] * 8
            ints = [np.asarray(c, dtype=np.int64) for c in cols]
            floats = [np.asarray(c, dtype=np.float64) for c in cols]
            trace = StepTrace(
                ints[0], ints[1], floats[2], ints[3], floats[4], ints[5], ints[6], ints[7]
            )
        n = self.steps
        return SimResult(
            total_tokens=self.tokens,
            sim_seconds=self.seconds,
            steps=n,
            mean_k=self.k_sum / n if n else 0.0,
            k_changes_per_1000_steps=1000.0 * self.k_changes / n if n else 0.0,
            mean_batch_size=self.bs_sum / n if n else 0.0,
            completed_requests=self.completed,
            mean_latency_s=self.latency_sum / self.completed if self.completed else 0.0,
            drafted=self.drafted,
            accepted=self.accepted,
            decode_seq_steps=self.decode_seq_steps,
            trace=trace,
        )


def simulate(
    config: EngineConfig,
    workload: Workload,
    policy: KPolicy | None = None,
    *,
    steps: int | None = None,
    duration_s: float | None = None,
    seed: int = 0,
    warmup_steps: int = 0,
    trace: bool = False,
) -> SimResult:
    """Run the engine until ``steps`` counted steps or ``duration_s`` simulated seconds.

    ``policy`` chooses K each step (required when speculation is configured;
    ignored for vanilla). The first ``warmup_steps`` steps run but are not
    counted. Deterministic for a given ``seed``.
    """
    if steps is None and duration_s is None:
        raise ValueError("give steps or duration_s")
    if config.speculative and policy is None:
        raise ValueError("a speculative engine needs a policy (FixedPolicy(k) for a fixed K)")
    return _Run(config, workload, policy, seed, warmup_steps, trace).run(steps, duration_s)


class _Run:
    """State of one simulation run (kept off the public API)."""

    def __init__(
        self,
        config: EngineConfig,
        workload: Workload,
        policy: KPolicy | None,
        seed: int,
        warmup_steps: int,
        trace: bool,
    ) -> None:
        self.c = config
        self.workload = workload
        self.policy = policy if config.speculative else None
        s_uniform, s_lengths, s_arrivals, s_sampler = np.random.SeedSequence(seed).spawn(4)
        self.u_rng = np.random.default_rng(s_uniform)
        self.arrival_rng = np.random.default_rng(s_arrivals)
        self.stream = RequestStream(
            workload.prompt, workload.output, np.random.default_rng(s_lengths)
        )
        self.sampler = config.acceptance.sampler(
            config.max_batch_size, np.random.default_rng(s_sampler)
        )
        self.slots = _Slots(config.max_batch_size)
        self.queue: deque[float] = deque()
        self.limit = config.max_batch_size
        if isinstance(workload, ClosedLoop | OscillatingLoop):
            self.limit = min(self.limit, workload.concurrency)
        self.warmup = warmup_steps
        self.rec = _Recorder(config.max_k, trace)
        self.t = 0.0
        self.step_index = 0
        self.n_active = 0
        self.n_prefilling = 0

    def run(self, steps: int | None, duration_s: float | None) -> SimResult:
        while True:
            counted = self.step_index - self.warmup
            if steps is not None and counted >= steps:
                break
            if duration_s is not None and self.t >= duration_s:
                break
            self._admit()
            if self.n_active == 0:
                self._idle()
                continue
            self._step()
        return self.rec.result()

    def _admit(self) -> None:
        slots = self.slots
        room = self.limit - self.n_active
        if room <= 0:
            return
        if isinstance(self.workload, OpenLoop):
            room = min(room, len(self.queue))
            if room == 0:
                return
            arrival = np.asarray([self.queue.popleft() for _ in range(room)])
        else:
            arrival = np.full(room, self.t)
        idx = np.nonzero(~slots.active)[0][:room]
        prompt, output = self.stream.take(idx.size)
        slots.fill(idx, prompt, output, arrival)
        self.sampler.admit(idx)
        self.n_active += idx.size
        self.n_prefilling += idx.size

    def _idle(self) -> None:
        assert isinstance(self.workload, OpenLoop)
        t1 = self.t + IDLE_TICK_S
        self.queue.extend(arrivals(self.workload.rate, self.t, t1, self.arrival_rng))
        self.t = t1

    def _prefill_chunks(self, decode_count: int, want: IntArray) -> IntArray:
        """Prompt tokens each slot prefills this step, under the token budget."""
        budget = self.c.max_batched_tokens - decode_count * (self.c.max_k + 1)
        before = np.cumsum(want) - want
        chunk: IntArray = np.minimum(np.maximum(budget - before, 0), want)
        return chunk

    def _capped(self) -> BoolArray | None:
        """Slots scheduled this step when the workload caps the batch, else None.

        The cap rotates over the running requests so that none starves.
        """
        if not isinstance(self.workload, OscillatingLoop):
            return None
        cap = self.workload.scheduled_cap(self.step_index)
        if cap >= self.n_active:
            return None
        shift = (self.step_index * cap) % self.slots.active.size
        rotated = np.roll(self.slots.active, -shift)
        picked: BoolArray = np.roll(rotated & (np.cumsum(rotated) <= cap), shift)
        return picked

    def _schedule(self) -> _Batch:
        """Which slots decode and how many prompt tokens each prefills this step."""
        s = self.slots
        capped = self._capped()
        if capped is None and not self.n_prefilling:
            return _Batch(s.active, self.n_active, None, None, 0, 0, 0, 0.0)
        running = s.active if capped is None else capped
        decoding = running & (s.prompt_left == 0)
        n_dec = int(np.count_nonzero(decoding))
        chunk = self._prefill_chunks(n_dec, s.prompt_left * running)
        prefilling = chunk > 0
        prefill_tokens = int(chunk.sum())
        pre_ctx = s.ctx * prefilling
        pairs = float(np.dot(chunk, pre_ctx)) + float(np.dot(chunk, chunk)) / 2.0
        return _Batch(
            decoding,
            n_dec,
            chunk,
            prefilling,
            int(np.count_nonzero(prefilling)),
            prefill_tokens,
            int(pre_ctx.sum()) + prefill_tokens,
            pairs,
        )

    def _step(self) -> None:
        s, c = self.slots, self.c
        decoding, n_dec, chunk, prefilling, n_pre, prefill_tokens, pre_context, pre_pairs = (
            self._schedule()
        )
        bs = n_dec + n_pre
        k = 0
        if self.policy is not None:
            k = min(max(int(self.policy.choose_k(bs)), 0), c.max_k)
        ctx_dec = int(np.dot(s.ctx, decoding))
        dt = c.cost.step_seconds(
            n_dec,
            k,
            context_tokens=ctx_dec + pre_context,
            attention_pairs=(k + 1) * ctx_dec + pre_pairs,
            prefill_tokens=prefill_tokens,
            prefill_seqs=n_pre,
            speculative=c.speculative,
        )
        u = self.u_rng.random(c.max_batch_size)
        n_acc = self.sampler.accepted(u, decoding, k, self.step_index, self.t)
        produced = np.minimum(n_acc + 1, s.out_left) * decoding
        if chunk is not None and prefilling is not None:
            s.prompt_left -= chunk
            first = prefilling & (s.prompt_left == 0)
            produced += first
            s.ctx += chunk
            self.n_prefilling -= int(np.count_nonzero(first))
        s.ctx += produced
        s.out_left -= produced
        tokens = int(produced.sum())
        end = self.t + dt
        if isinstance(self.workload, OpenLoop):
            self.queue.extend(arrivals(self.workload.rate, self.t, end, self.arrival_rng))
        self.t = end
        hist = np.bincount(n_acc[decoding], minlength=k + 1).tolist() if k else [n_dec]
        drafted, accepted = _conditional_from_hist(hist, k)
        counted = self.step_index >= self.warmup
        self._finish(counted)
        if counted:
            rec = self.rec
            for i in range(k):
                rec.drafted[i] += drafted[i]
                rec.accepted[i] += accepted[i]
            acc_total = sum(i * h for i, h in enumerate(hist)) if k else 0
            rec.step(bs, k, dt, tokens, end, n_dec, prefill_tokens, acc_total)
        if self.policy is not None:
            self.policy.observe(
                StepRecord(
                    bs,
                    k,
                    dt,
                    reached=drafted,
                    proposed=drafted,
                    accepted=accepted,
                    decode_sequences=n_dec,
                    verified_tokens=n_dec * (k + 1),
                    context_tokens=int(s.ctx[decoding].sum()),
                    offered=[n_dec] * k,
                    scheduled=[n_dec] * k,
                )
            )
        self.step_index += 1

    def _finish(self, counted: bool) -> None:
        s = self.slots
        done = np.nonzero(s.active & (s.out_left <= 0))[0]
        if done.size == 0:
            return
        s.active[done] = False
        self.n_active -= done.size
        if counted:
            self.rec.completed += done.size
            self.rec.latency_sum += done.size * self.t - float(s.arrival[done].sum())


def _conditional_from_hist(hist: list[int], k: int) -> tuple[list[int], list[int]]:
    """(drafted, accepted) per position from a histogram of accepted counts 0..k."""
    drafted = [0] * k
    accepted = [0] * k
    at_least = 0
    for i in range(k, 0, -1):
        at_least += hist[i]
        accepted[i - 1] = at_least
    # position i+1 is drafted when at least i drafts were accepted
    for i in range(k):
        drafted[i] = accepted[i - 1] if i > 0 else sum(hist)
    return drafted, accepted
