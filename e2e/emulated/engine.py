"""The emulated engine: vLLM-style continuous batching in real time, priced by the simulator.

One asyncio task runs steps back to back while there is work, as vLLM's
engine core does:

1. waiting requests take free batch slots, up to ``max_num_seqs`` (and the
   preset's ``max_batch_size``, the KV-cache limit the preset encodes: past
   it requests wait, as vLLM queues them when its KV cache is full);
2. decoding requests get one token plus their drafts; prompts are prefilled
   in chunks under the token budget (``max_num_batched_tokens`` less
   ``maxK + 1`` per decoding request, the simulator's rule);
3. K for the step comes from the ``KSource`` (the real add-on, vLLM's own
   lookup, a fixed K or none) for the number of scheduled requests, prefills
   included (vLLM indexes its lookup by ``len(num_scheduled_tokens)``);
4. proposal lengths and accepted counts per decoding request are drawn from
   its traffic class (``drafting``), the step's cost is the simulator's
   ``StepCost.step_seconds`` for exactly those decoding requests, verified
   tokens, prefill chunks and KV context on the pod's GPU (with the add-on,
   its plugin's K=0 step: ``KSource.plain_k0``; a stateful drafter's K=0
   pass goes to the add-on's ledger as the worker would time it);
5. the task sleeps that long (times ``time_scale``) to a running deadline,
   so host jitter does not accumulate; then each decoding request gains
   accepted + 1 tokens (capped by what it still has to say), a completed
   prefill its first token, and finished requests leave;
6. the add-on gets the step as vLLM's hook reads it: per decoding request
   (K, L, accepted), the verified and context tokens, and the step's
   *modelled* seconds when it was a clean decode step (no prefill, no K
   change): the emulated GPU's time, not the host's, so the add-on's cost
   model sees the GPU the profile describes whatever the time scale.

Unlike vLLM (whose drafts are proposed after a step with that step's K and
verified in the next), drafts here are proposed and verified in the step that
chose K, as in the simulator's engine; the add-on's readings carry the K
they were verified at either way.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from e2e.emulated.drafting import DraftSampler
from e2e.emulated.ksource import KSource
from e2e.emulated.vllm_metrics import FinishedRequest, VllmMetrics
from specdeploy.runtime.sim.step_time import StepCost
from specdeploy.runtime.sim.workload import Lengths
from specdeploy.runtime.vllm_addon.steps import StepReading

log = logging.getLogger("specdeploy.emulated")

MAX_LAG_S = 0.05
"""How far behind its deadline the step loop may catch up; beyond, it starts afresh."""
NO_DECODE = StepReading(0, (), 0, 0)


@dataclass(frozen=True)
class Emitted:
    """Tokens a request gained in one step; ``finish_reason`` set on its last."""

    tokens: int
    finish_reason: str | None = None


@dataclass(frozen=True)
class NewRequest:
    """What the API layer hands the engine (already validated)."""

    prompt_tokens: int
    max_tokens: int
    """Most tokens to generate (``max_tokens`` or what the context leaves)."""
    ignore_eos: bool
    min_tokens: int
    workload: int
    """Index of the request's traffic class (``DraftSampler``'s classes)."""
    max_tokens_param: int | None = None
    """``max_tokens`` as the client sent it (vLLM's histogram of it)."""


@dataclass(eq=False)
class Sequence:
    """One request inside the engine."""

    request: NewRequest
    target: int
    """Tokens it will generate: its natural length or ``max_tokens``."""
    finish_reason: str
    """What it finishes with on reaching ``target``: ``stop`` (EOS) or ``length``."""
    arrival: float
    events: asyncio.Queue[Emitted] = field(default_factory=asyncio.Queue)
    slot: int = -1
    prompt_left: int = 0
    ctx: int = 0
    produced: int = 0
    scheduled_at: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    done: bool = False


@dataclass(frozen=True)
class EngineLimits:
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_max_seqs: int
    """The preset's ``max_batch_size``: sequences its KV cache holds."""


class Engine:
    """The step loop and its requests (module docstring)."""

    def __init__(
        self,
        *,
        cost: StepCost,
        ksource: KSource,
        sampler: DraftSampler,
        metrics: VllmMetrics,
        limits: EngineLimits,
        output_lengths: Lengths,
        seed: int = 0,
        time_scale: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if time_scale <= 0:
            raise ValueError(f"time_scale must be > 0, got {time_scale}")
        self.cost = cost
        self.ks = ksource
        self.sampler = sampler
        self.metrics = metrics
        self.limits = limits
        self.time_scale = time_scale
        self.clock = clock
        self._lengths = output_lengths
        self._rng = np.random.default_rng(np.random.SeedSequence([seed, 0x0E05]))
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self._free = list(range(min(limits.max_num_seqs, limits.kv_max_seqs)))[::-1]
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._deadline: float | None = None
        self._last_k = -1
        self.steps = 0
        self.modelled_seconds = 0.0
        """Sum of the steps' modelled GPU seconds."""
        self.behind_s = 0.0
        """Wall seconds the host lost beyond what the pacing could catch up (a slow host)."""

    # --- requests --------------------------------------------------------------

    def submit(self, request: NewRequest) -> Sequence:
        """Queue a request; its ``events`` queue receives what it generates."""
        target, reason = self._target(request)
        seq = Sequence(request, target, reason, self.clock(), prompt_left=request.prompt_tokens)
        self.waiting.append(seq)
        self.metrics.waiting.set(len(self.waiting))
        self._idle.clear()
        self._wake.set()
        return seq

    def abort(self, seq: Sequence) -> None:
        """The client went away (or the drain timed out): the request leaves now."""
        if seq.done:
            return
        if seq in self.waiting:
            self.waiting.remove(seq)
        self._finish(seq, "abort", self.clock())

    @property
    def busy(self) -> bool:
        return bool(self.running or self.waiting)

    async def wait_idle(self) -> None:
        """Until no request is waiting or running."""
        await self._idle.wait()

    def _target(self, request: NewRequest) -> tuple[int, str]:
        if request.ignore_eos:
            return request.max_tokens, "length"
        natural = int(self._lengths.sample(self._rng, 1)[0])
        natural = max(natural, request.min_tokens, 1)
        if natural < request.max_tokens:
            return natural, "stop"
        return request.max_tokens, "length"

    # --- the loop --------------------------------------------------------------

    async def run(self) -> None:
        """Step while there is work; sleep on an event while there is none."""
        while True:
            if not self.busy:
                self._deadline = None
                self._idle.set()
                self._wake.clear()
                await self._wake.wait()
                continue
            await self.step()

    async def step(self) -> None:
        """One engine step (module docstring, 1-6)."""
        self._admit()
        decoding = [s for s in self.running if s.prompt_left == 0]
        chunks = self._prefill_chunks(len(decoding))
        batch_size = len(decoding) + len(chunks)
        if batch_size == 0:
            await asyncio.sleep(0)
            return
        k = self.ks.choose(batch_size)
        slots = np.fromiter((s.slot for s in decoding), dtype=np.int64, count=len(decoding))
        lengths, accepted = self.sampler.draw(slots, k, self.steps, self.modelled_seconds)
        ctx = np.fromiter((s.ctx for s in decoding), dtype=np.int64, count=len(decoding))
        verified = len(decoding) + int(lengths.sum())
        ctx_dec = int(ctx.sum())
        pairs = float(np.dot(lengths + 1, ctx))
        prefill = sum(c for _, c in chunks)
        pre_ctx = sum(s.ctx + c for s, c in chunks)
        pre_pairs = sum(c * s.ctx + c * c / 2.0 for s, c in chunks)
        switched = self.ks.speculative and self._last_k >= 0 and k != self._last_k
        seconds = self.cost.step_seconds(
            len(decoding),
            k,
            context_tokens=ctx_dec + pre_ctx,
            attention_pairs=pairs + pre_pairs,
            prefill_tokens=prefill,
            prefill_seqs=len(chunks),
            speculative=self.ks.speculative,
            verified_tokens=verified,
            piecewise=self.ks.piecewise,
            switched=switched,
            plain_k0=self.ks.plain_k0,
        )
        ledger = self.ks.k0_ledger
        if ledger is not None and k == 0 and decoding and not chunks:  # the worker's clock
            timed = self.cost.k0_pass_seconds(len(decoding), verified, ctx_dec)
            if timed > 0:  # a stateless drafter runs no pass (n-gram)
                ledger.add(len(decoding), timed)
        await self._pace(seconds * self.time_scale)
        self._last_k = k
        self.steps += 1
        self.modelled_seconds += seconds
        produced = self._commit(decoding, accepted, chunks)
        self._record(k, lengths, accepted, prefill, produced)
        reading = NO_DECODE
        if decoding:
            triples = tuple((k, int(n), int(a)) for n, a in zip(lengths, accepted, strict=True))
            reading = StepReading(k, triples, verified, ctx_dec)
        clean = bool(decoding) and not chunks and not switched
        self.ks.observe(batch_size, k, seconds if clean else None, reading)

    def _admit(self) -> None:
        now = self.clock()
        while self.waiting and self._free:
            seq = self.waiting.popleft()
            seq.slot = self._free.pop()
            seq.scheduled_at = now
            self.sampler.admit(seq.slot, seq.request.workload)
            self.running.append(seq)
        self.metrics.waiting.set(len(self.waiting))
        self.metrics.running.set(len(self.running))

    def _prefill_chunks(self, decoding: int) -> list[tuple[Sequence, int]]:
        budget = self.limits.max_num_batched_tokens - decoding * (self.ks.max_k + 1)
        chunks = []
        for seq in self.running:
            if seq.prompt_left == 0 or budget <= 0:
                continue
            chunk = min(seq.prompt_left, budget)
            chunks.append((seq, chunk))
            budget -= chunk
        return chunks

    async def _pace(self, wall: float) -> None:
        """Sleep until this step's deadline (the previous one plus ``wall``)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._deadline is not None and now - self._deadline > MAX_LAG_S:
            self.behind_s += now - self._deadline - MAX_LAG_S
        start = now if self._deadline is None else max(self._deadline, now - MAX_LAG_S)
        self._deadline = start + wall
        await asyncio.sleep(max(0.0, self._deadline - now))

    def _commit(
        self,
        decoding: list[Sequence],
        accepted: npt.NDArray[np.int64],
        chunks: list[tuple[Sequence, int]],
    ) -> int:
        now = self.clock()
        produced = 0
        for seq, n in zip(decoding, accepted, strict=True):
            if not seq.done:
                produced += self._emit(seq, min(int(n) + 1, seq.target - seq.produced), now)
        for seq, chunk in chunks:
            if seq.done:
                continue
            seq.prompt_left -= chunk
            seq.ctx += chunk
            if seq.prompt_left == 0:
                self.metrics.prompt_tokens.inc(seq.request.prompt_tokens)
                produced += self._emit(seq, 1, now)
        return produced

    def _emit(self, seq: Sequence, tokens: int, now: float) -> int:
        if seq.first_token_at is None:
            seq.first_token_at = now
            self.metrics.ttft.observe(now - seq.arrival)
        elif seq.last_token_at is not None:
            self.metrics.itl.observe(now - seq.last_token_at)
        seq.last_token_at = now
        seq.produced += tokens
        seq.ctx += tokens
        seq.events.put_nowait(Emitted(tokens))
        if seq.produced >= seq.target:
            self._finish(seq, seq.finish_reason, now)
        return tokens

    def _finish(self, seq: Sequence, reason: str, now: float) -> None:
        seq.done = True
        if seq.slot >= 0:
            self.running.remove(seq)
            self._free.append(seq.slot)
            seq.slot = -1
        seq.events.put_nowait(Emitted(0, reason))
        scheduled = seq.scheduled_at if seq.scheduled_at is not None else now
        first = seq.first_token_at if seq.first_token_at is not None else now
        last = seq.last_token_at if seq.last_token_at is not None else now
        self.metrics.finished(
            FinishedRequest(
                finish_reason=reason,
                e2e_latency=now - seq.arrival,
                queued_time=scheduled - seq.arrival,
                prefill_time=first - scheduled,
                decode_time=last - first,
                inference_time=last - scheduled,
                prompt_tokens=seq.request.prompt_tokens,
                generation_tokens=seq.produced,
                max_tokens_param=seq.request.max_tokens_param,
            )
        )
        self.metrics.running.set(len(self.running))
        self.metrics.waiting.set(len(self.waiting))

    def _record(
        self,
        k: int,
        lengths: npt.NDArray[np.int64],
        accepted: npt.NDArray[np.int64],
        prefill: int,
        produced: int,
    ) -> None:
        m = self.metrics
        if produced:
            m.generation_tokens.inc(produced)
        m.iteration_tokens.observe(prefill + produced)
        if m.spec is not None and lengths.size:
            m.spec.observe(lengths.tolist(), accepted.tolist())
