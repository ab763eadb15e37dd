"""A continuous-batching engine driven by a K policy, step by step.

Each step, as vLLM V1 does it:

1. Arrivals up to now join the queue (open loops draw their arrival times
   ahead, from the seed alone: ``workload.ArrivalPlan``). Waiting requests
   take free slots (up to the max batch size; in a closed loop, up to the
   concurrency). Prompts are prefilled in chunks under a token budget that
   reserves maxK + 1 tokens per decoding sequence.
2. The batch size is the number of scheduled sequences, prefills included
   (vLLM indexes ``dynamic_sd_lookup`` by ``len(num_scheduled_tokens)``);
   the policy's ``choose_k(batch_size)`` picks K for the whole batch.
3. Each decoding sequence gets a proposal of L <= K drafts (always K for
   model drafters; lookup drafters often fewer or none: ``proposals.py``) and
   draws one uniform; its accepted count is the largest n <= L with S_n > u
   (``acceptance.py``); it gains n + 1 tokens (capped by what it still has to
   say). A prefill that completes samples its first token.
4. The step costs what the cost model says for the tokens it verifies
   (1 + L per decoding sequence) and prefills and the KV it reads; a pod with
   a K table pays piecewise graphs, a change of K pays the switch.
5. Finished requests leave; ``observe`` gets what the vLLM add-on reads off
   vLLM: the reached/proposed/accepted counts per position
   (``goodput.reached_counts``), the verified and context tokens, and the
   step time only for a clean decode step (the add-on times no step that
   carries a prefill, so neither does this).

Uniforms are drawn for every slot every step, whatever K is chosen, so that
two runs with the same seed see the same random stream. Everything here is
modelled time, not wall time.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from specdeploy.runtime.goodput import DraftCounts
from specdeploy.runtime.policy.base import KPolicy, StepRecord
from specdeploy.runtime.sim.acceptance import AcceptanceModel, ClassedSampler
from specdeploy.runtime.sim.counts import per_sequence_k_counts, uniform_k_counts
from specdeploy.runtime.sim.proposals import ALWAYS_FULL, ProposalModel
from specdeploy.runtime.sim.state import PerClassPolicy, StatePolicy, StepState
from specdeploy.runtime.sim.step_time import StepCost
from specdeploy.runtime.sim.workload import (
    ArrivalPlan,
    ClosedLoop,
    OpenLoop,
    OscillatingLoop,
    RequestStream,
    Rollout,
    Workload,
    is_finite,
)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

MAX_IDLE_S = 86_400.0
"""An open loop idle this long with no arrival in sight cannot reach its step count."""

AnyPolicy = KPolicy | StatePolicy | PerClassPolicy


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
    proposals: ProposalModel = field(default=ALWAYS_FULL)
    """How many drafts the drafter proposes (a workload property for lookup drafters)."""
    piecewise_graphs: bool = False
    """A K table is set (table and adaptive policies): vLLM runs piecewise CUDA graphs."""
    plain_k0: bool = False
    """The add-on's plugin is loaded (the adaptive policy, the profiler): a K=0 step
    skips a stateless drafter (``step_time`` module docstring)."""

    def __post_init__(self) -> None:
        if self.max_batch_size < 1 or self.max_k < 0:
            raise ValueError("max_batch_size must be >= 1 and max_k >= 0")
        if self.max_batched_tokens < self.max_batch_size * (self.max_k + 1):
            raise ValueError("max_batched_tokens must fit a full batch of maxK+1 tokens")
        if self.piecewise_graphs and not self.speculative:
            raise ValueError("piecewise_graphs: a K table needs speculation configured")
        if self.plain_k0 and not self.speculative:
            raise ValueError("plain_k0: the plugin acts on speculative engines only")


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
    verified: IntArray
    """Tokens the decoding sequences verified (1 + proposal length each)."""
    context: IntArray
    """KV tokens the decoding sequences read."""
    counts: IntArray
    """Shape (steps, 5, maxK): per step the reached, proposed, accepted, offered and
    scheduled counts per position (``goodput.reached_counts``)."""
    k0_pass: FloatArray | None = None
    """Per step, the seconds of ``seconds`` a pod times as the drafter's K=0 pass
    (``StepCost.k0_pass_seconds``; 0 at K > 0, with a prefill, or for other drafters)."""

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
class RequestLog:
    """Arrival and finish time of each request completed in the counted steps."""

    arrival: FloatArray
    finish: FloatArray

    @property
    def latency(self) -> FloatArray:
        out: FloatArray = self.finish - self.arrival
        return out


@dataclass(frozen=True)
class SimResult:
    """What a run produced, over the counted (post-warm-up) steps.

    The per-position counts pool ``goodput.reached_counts`` over every
    counted step, so a_i = accepted / reached, q_i = proposed / reached and
    s_i = offered / scheduled, exactly as the add-on would report them.
    """

    total_tokens: int
    sim_seconds: float
    """Engine seconds: the counted steps' durations summed (idle time excluded)."""
    steps: int
    mean_k: float
    k_changes_per_1000_steps: float
    mean_batch_size: float
    completed_requests: int
    mean_latency_s: float
    reached: IntArray
    proposed: IntArray
    accepted: IntArray
    offered: IntArray
    scheduled: IntArray
    decode_seq_steps: int
    """Sum over steps of decoding sequences (denominator of observed AL)."""
    verified_tokens: int
    """Tokens the decoding sequences verified, summed over steps (1 + L each)."""
    context_tokens: int
    """KV tokens the decoding sequences read, summed over steps."""
    end_time: float = 0.0
    """The simulated clock when the run stopped (idle time included): a drain's makespan."""
    trace: StepTrace | None = None
    requests: RequestLog | None = None
    """Per completed request, when traced."""

    @property
    def drafted(self) -> IntArray:
        """The reached counts (the profiler's ``CellSample.drafted``)."""
        return self.reached

    @property
    def tokens_per_s(self) -> float:
        return self.total_tokens / self.sim_seconds if self.sim_seconds > 0 else 0.0

    @property
    def mean_step_seconds(self) -> float:
        return self.sim_seconds / self.steps if self.steps else 0.0

    def acceptance_per_position(self) -> FloatArray:
        """Observed a_i = accepted / reached (NaN where nothing was reached)."""
        return _ratio(self.accepted, self.reached)

    def drafting_rate(self) -> FloatArray:
        """Observed q_i = proposed / reached (NaN where nothing was reached)."""
        return _ratio(self.proposed, self.reached)

    def proposal_survival(self) -> FloatArray:
        """Observed s_i = offered / scheduled = P(proposal length >= i)."""
        return _ratio(self.offered, self.scheduled)


def _ratio(num: IntArray, den: IntArray) -> FloatArray:
    d = den.astype(np.float64)
    out: FloatArray = np.divide(num, d, out=np.full(d.shape, np.nan), where=d > 0)
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


_Row = tuple[int, int, float, int, float, int, int, int, int, int]


class _Recorder:
    """Accumulates counted steps; keeps the per-step arrays only when asked."""

    def __init__(self, max_k: int, trace: bool) -> None:
        self.trace = trace
        self.rows: list[_Row] = []
        self.max_k = max_k
        self.counts = np.zeros((5, max_k), dtype=np.int64)  # reached..scheduled
        self.step_counts: list[IntArray] = []
        self.k0_pass: list[float] = []
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
        self.verified = 0
        self.context = 0
        self.arrivals: list[float] = []
        self.finishes: list[float] = []

    def add_counts(self, counts: DraftCounts) -> None:
        n = len(counts.reached)
        row = np.zeros((5, self.max_k), dtype=np.int64)
        if n:
            row[:, :n] = np.asarray(counts, dtype=np.int64)
            self.counts += row
        if self.trace:
            self.step_counts.append(row)

    def step(self, row: _Row, k0_pass: float = 0.0) -> None:
        bs, k, dt, tokens, _end, decode, _prefill, _accepted, verified, context = row
        self.tokens += tokens
        self.seconds += dt
        self.steps += 1
        self.k_sum += k
        self.bs_sum += bs
        self.decode_seq_steps += decode
        self.verified += verified
        self.context += context
        if self.last_k is not None and k != self.last_k:
            self.k_changes += 1
        self.last_k = k
        if self.trace:
            self.rows.append(row)
            self.k0_pass.append(k0_pass)

    def result(self, end_time: float) -> SimResult:
        trace, requests = None, None
        if self.trace:
            requests = RequestLog(np.asarray(self.arrivals), np.asarray(self.finishes))
            cols = list(zip(*self.rows, strict=True)) if self.rows else [()] * 10
            ints = [np.asarray(c, dtype=np.int64) for c in cols]
            floats = [np.asarray(c, dtype=np.float64) for c in cols]
            counts = (
                np.stack(self.step_counts)
                if self.step_counts
                else np.zeros((0, 5, self.max_k), dtype=np.int64)
            )
            trace = StepTrace(
                ints[0], ints[1], floats[2], ints[3], floats[4], ints[5], ints[6], ints[7],
                ints[8], ints[9], counts, np.asarray(self.k0_pass, dtype=np.float64),
            )  # fmt: skip
        n = self.steps
        reached, proposed, accepted, offered, scheduled = self.counts
        return SimResult(
            total_tokens=self.tokens,
            sim_seconds=self.seconds,
            steps=n,
            mean_k=self.k_sum / n if n else 0.0,
            k_changes_per_1000_steps=1000.0 * self.k_changes / n if n else 0.0,
            mean_batch_size=self.bs_sum / n if n else 0.0,
            completed_requests=self.completed,
            mean_latency_s=self.latency_sum / self.completed if self.completed else 0.0,
            reached=reached,
            proposed=proposed,
            accepted=accepted,
            offered=offered,
            scheduled=scheduled,
            decode_seq_steps=self.decode_seq_steps,
            verified_tokens=self.verified,
            context_tokens=self.context,
            end_time=end_time,
            trace=trace,
            requests=requests,
        )


def simulate(
    config: EngineConfig,
    workload: Workload,
    policy: AnyPolicy | None = None,
    *,
    steps: int | None = None,
    duration_s: float | None = None,
    seed: int = 0,
    warmup_steps: int = 0,
    trace: bool = False,
) -> SimResult:
    """Run the engine until ``steps`` counted steps or ``duration_s`` simulated seconds.

    A finite workload (a ``Rollout``, an ``OpenLoop`` with a horizon) given
    neither runs until every request has finished. ``policy`` chooses K each
    step (required when speculation is configured; ignored for vanilla).
    The first ``warmup_steps`` steps run but are not counted. Deterministic
    for a given ``seed``.
    """
    if steps is None and duration_s is None and not is_finite(workload):
        raise ValueError("give steps or duration_s (or a workload that ends)")
    if config.speculative and policy is None:
        raise ValueError("a speculative engine needs a policy (FixedPolicy(k) for a fixed K)")
    return _Run(config, workload, policy, seed, warmup_steps, trace).run(steps, duration_s)


class _Run:
    """State of one simulation run (kept off the public API)."""

    def __init__(
        self,
        config: EngineConfig,
        workload: Workload,
        policy: AnyPolicy | None,
        seed: int,
        warmup_steps: int,
        trace: bool,
    ) -> None:
        self.c = config
        self.workload = workload
        self.policy = policy if config.speculative else None
        # Protocol checks are slow: classify the policy once, not per step.
        self.per_class = self.policy if isinstance(self.policy, PerClassPolicy) else None
        self.stateful = self.policy if isinstance(self.policy, StatePolicy) else None
        self.plain = (
            self.policy
            if isinstance(self.policy, KPolicy) and self.per_class is None and self.stateful is None
            else None
        )
        streams = np.random.SeedSequence(seed).spawn(5)
        s_uniform, s_lengths, s_arrivals, s_sampler, s_proposals = streams
        self.u_rng = np.random.default_rng(s_uniform)
        self.proposal_rng = np.random.default_rng(s_proposals)
        self.stream = RequestStream(
            workload.prompt, workload.output, np.random.default_rng(s_lengths)
        )
        self.sampler = config.acceptance.sampler(
            config.max_batch_size, np.random.default_rng(s_sampler)
        )
        self.plan: ArrivalPlan | None = None
        self.queue: deque[float] = deque()
        if isinstance(workload, OpenLoop):
            self.plan = ArrivalPlan(
                workload.rate, np.random.default_rng(s_arrivals), workload.horizon_s
            )
        elif isinstance(workload, Rollout):
            self.queue.extend([0.0] * workload.requests)
        self.slots = _Slots(config.max_batch_size)
        self.limit = config.max_batch_size
        if isinstance(workload, ClosedLoop | OscillatingLoop):
            self.limit = min(self.limit, workload.concurrency)
        self.warmup = warmup_steps
        self.rec = _Recorder(config.max_k, trace)
        self.t = 0.0
        self.step_index = 0
        self.n_active = 0
        self.n_prefilling = 0
        self.last_k = -1

    def run(self, steps: int | None, duration_s: float | None) -> SimResult:
        while True:
            counted = self.step_index - self.warmup
            if steps is not None and counted >= steps:
                break
            if duration_s is not None and self.t >= duration_s:
                break
            if self.plan is not None:
                self.queue.extend(self.plan.pop_until(self.t))
            self._admit()
            if self.n_active == 0:
                if not self._idle(duration_s):
                    break
                continue
            self._step()
        return self.rec.result(self.t)

    def _admit(self) -> None:
        slots = self.slots
        room = self.limit - self.n_active
        if room <= 0:
            return
        if self.plan is not None or isinstance(self.workload, Rollout):
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

    def _idle(self, duration_s: float | None) -> bool:
        """Nothing to run: jump to the next arrival; False when the run is over."""
        if self.plan is None:
            return False  # a drained rollout
        limit = duration_s if duration_s is not None else self.t + MAX_IDLE_S
        nxt = self.plan.next_time(limit)
        if nxt is None or nxt > limit:
            if duration_s is not None or is_finite(self.workload):
                self.t = max(self.t, duration_s or self.t)
                return False
            raise RuntimeError("open loop idle for a day of simulated time: no arrivals left")
        self.t = max(self.t, nxt)
        return True

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

    def _choose(self, batch: _Batch, ctx_dec: int) -> tuple[int, IntArray | None]:
        """(K of the step, per-slot K when a per-class policy set one)."""
        if self.policy is None:
            return 0, None
        bs = batch.n_dec + batch.n_pre
        max_k = self.c.max_k
        if self.plain is not None:
            return min(max(int(self.plain.choose_k(bs)), 0), max_k), None
        state = StepState(
            bs,
            batch.n_dec,
            ctx_dec,
            batch.prefill_tokens,
            batch.n_pre,
            batch.pre_context,
            batch.pre_pairs,
            self.last_k,
            self.step_index,
            self.t,
        )
        if self.per_class is not None:
            if not isinstance(self.sampler, ClassedSampler):
                raise ValueError("a per-class policy needs a Mixture acceptance model")
            classes = self.sampler.slot_classes
            counts = np.bincount(classes[batch.decoding], minlength=int(classes.max()) + 1)
            state = state._replace(class_counts=tuple(int(c) for c in counts))
            ks = np.asarray(self.per_class.choose_class_k(state), dtype=np.int64)
            per_slot: IntArray = np.clip(ks, 0, max_k)[classes]
            return int(per_slot[batch.decoding].max(initial=0)), per_slot
        assert self.stateful is not None
        return min(max(int(self.stateful.choose_k_for(state)), 0), max_k), None

    def _step(self) -> None:
        s, c = self.slots, self.c
        batch = self._schedule()
        decoding, n_dec = batch.decoding, batch.n_dec
        ctx_dec = int(np.dot(s.ctx, decoding))
        k, per_slot = self._choose(batch, ctx_dec)
        u = self.u_rng.random(c.max_batch_size)
        # Proposal lengths (and so the verified tokens) before pricing the step.
        lengths: IntArray | None = None
        full = c.proposals.always_full
        if not full:
            exists_u = self.proposal_rng.random(c.max_batch_size)
            length_u = self.proposal_rng.random(c.max_batch_size)
            lengths = c.proposals.lengths(exists_u, length_u, k)
        if per_slot is not None:
            lengths = per_slot if lengths is None else np.minimum(lengths, per_slot)
        n_acc = self.sampler.accepted(u, decoding, k, self.step_index, self.t)
        if lengths is not None:
            n_acc = np.minimum(n_acc, lengths)
        if lengths is None:
            verified = n_dec * (k + 1)
            pairs = (k + 1) * ctx_dec
        else:
            verified = n_dec + int(lengths[decoding].sum())
            pairs = int(np.dot(lengths + 1, s.ctx * decoding))
        switched = self.last_k >= 0 and k != self.last_k
        dt = c.cost.step_seconds(
            n_dec,
            k,
            context_tokens=ctx_dec + batch.pre_context,
            attention_pairs=pairs + batch.pre_pairs,
            prefill_tokens=batch.prefill_tokens,
            prefill_seqs=batch.n_pre,
            speculative=c.speculative,
            verified_tokens=verified,
            piecewise=c.piecewise_graphs,
            switched=switched,
            plain_k0=c.plain_k0,
        )
        produced = np.minimum(n_acc + 1, s.out_left) * decoding
        if batch.chunk is not None and batch.prefilling is not None:
            s.prompt_left -= batch.chunk
            first = batch.prefilling & (s.prompt_left == 0)
            produced += first
            s.ctx += batch.chunk
            self.n_prefilling -= int(np.count_nonzero(first))
        s.ctx += produced
        s.out_left -= produced
        tokens = int(produced.sum())
        end = self.t + dt
        self.t = end
        self.last_k = k
        accepted_dec = n_acc[decoding]
        if per_slot is not None:
            assert lengths is not None
            counts = per_sequence_k_counts(per_slot[decoding], lengths[decoding], accepted_dec)
        else:
            dec_lengths = None if lengths is None else lengths[decoding]
            counts = uniform_k_counts(k, dec_lengths, accepted_dec)
        counted = self.step_index >= self.warmup
        self._finish(counted)
        if counted:
            self.rec.add_counts(counts)
            acc_total = int(accepted_dec.sum()) if k else 0
            k0_pass = 0.0
            if self.rec.trace and k == 0 and c.speculative and batch.n_pre == 0:
                k0_pass = c.cost.k0_pass_seconds(n_dec, verified, ctx_dec)
            self.rec.step(
                (n_dec + batch.n_pre, k, dt, tokens, end, n_dec, batch.prefill_tokens, acc_total,
                 verified, ctx_dec),
                k0_pass,
            )  # fmt: skip
        if self.policy is not None:
            self.policy.observe(
                StepRecord(
                    n_dec + batch.n_pre,
                    k,
                    dt if batch.prefill_tokens == 0 else None,
                    reached=counts.reached,
                    proposed=counts.proposed,
                    accepted=counts.accepted,
                    decode_sequences=n_dec,
                    verified_tokens=verified,
                    context_tokens=ctx_dec,
                    offered=counts.offered,
                    scheduled=counts.scheduled,
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
            rec = self.rec
            rec.completed += done.size
            rec.latency_sum += done.size * self.t - float(s.arrival[done].sum())
            if rec.trace:
                rec.arrivals.extend(s.arrival[done].tolist())
                rec.finishes.extend([self.t] * done.size)
