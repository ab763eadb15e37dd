"""The ``sim`` profiler backend: a simulator preset measured like a GPU.

Each ``measure`` call runs ``profile_cell`` (runtime/sim/profiling.py), the
same fixed-size-batch experiment the simulator's own profiler runs: a
closed loop of ``batch_size`` long requests with a K table set (as the
``vllm`` backend sets one), prefill steps skipped, the pure decode steps
returned. Every call uses a fresh seed, so repeats draw fresh acceptance.

Besides the step times it returns what the add-on would count on those
steps (``CellSample``'s optional fields): per position the reached,
proposed, accepted, offered and scheduled counts (a position a lookup
drafter did not propose counts as reached and rejected), and the totals of
decoding sequence-steps, verified tokens (1 + proposal length each) and
context tokens, which the step-cost model (``cost.py``) is fitted from.
``measure(..., prompt_tokens=P)`` and ``measure_at_context`` start the
cell's sequences at a P-token context, so the profiler can walk a context
axis (``search.measure_contexts``). ``measure_baseline`` runs the
same cell with no speculation configured (no drafter, no table), the
plain-decoding floor the operator judges speculation against.

The simulator's step time is deterministic; a real engine's is not (kernel
launches, host scheduling, clocks). The backend multiplies each step by
log-normal noise (``jitter``, its log standard deviation, seeded) so the
search's stop-when-stable rule sees spread as it would on hardware. Set it
to 0 for the noise-free model.

Out of memory is modelled by the preset's ``max_batch_size`` (the KV-cache
limit the preset encodes): a larger batch fails as OOM, as a real engine
would. ``spent_seconds`` counts all simulated engine time, warm-up and
prefill included, up to the last measured step: what the profile cost.
"""

from __future__ import annotations

import numpy as np

from specdeploy.runtime.profile import Fingerprint, Source
from specdeploy.runtime.profiler.backend import CellSample
from specdeploy.runtime.profiler.exit_codes import out_of_memory
from specdeploy.runtime.sim.presets import Preset
from specdeploy.runtime.sim.profiling import profile_cell

DEFAULT_JITTER = 0.03


class SimBackend:
    """Runs fixed-size batches on a simulator preset (modelled, not measured)."""

    name = "sim"
    source = Source.MODELLED

    def __init__(
        self,
        preset: Preset,
        *,
        seed: int = 0,
        jitter: float = DEFAULT_JITTER,
        fingerprint: Fingerprint | None = None,
    ) -> None:
        """``fingerprint``: what the profile is keyed by instead of the preset's own
        (the local cluster's emulated GPU pods profile the pod's own model and
        engine, modelled by this preset; the profile still says ``modelled``)."""
        if jitter < 0:
            raise ValueError(f"jitter must be >= 0, got {jitter}")
        self.preset = preset
        self._fingerprint = fingerprint
        self.seed = seed
        self.jitter = jitter
        self._noise = np.random.default_rng(np.random.SeedSequence([seed, 0x5EED]))
        self._calls = 0
        self.spent_seconds = 0.0
        """Simulated engine seconds over every call, warm-up included."""

    def fingerprint(self) -> Fingerprint:
        return self._fingerprint or self.preset.fingerprint()

    def measure(
        self, batch_size: int, k: int, steps: int, *, prompt_tokens: int | None = None
    ) -> CellSample:
        """``steps`` pure decode steps of ``batch_size`` sequences at K=k."""
        return self._run(batch_size, k, steps, prompt_tokens=prompt_tokens, speculative=True)

    def default_prompt_tokens(self) -> int:
        """The preset's mean prompt (``profile_cell``'s default context)."""
        return max(1, round(self.preset.workload.prompt.mean))

    def measure_at_context(
        self, batch_size: int, k: int, steps: int, prompt_tokens: int
    ) -> CellSample:
        """``measure`` at a ``prompt_tokens``-token context (``MeasuresContext``)."""
        return self._run(batch_size, k, steps, prompt_tokens=prompt_tokens, speculative=True)

    def measure_baseline(self, batch_size: int, steps: int) -> CellSample:
        """``steps`` pure decode steps with no speculation configured (``MeasuresBaseline``)."""
        return self._run(batch_size, 0, steps, prompt_tokens=None, speculative=False)

    def _run(
        self,
        batch_size: int,
        k: int,
        steps: int,
        *,
        prompt_tokens: int | None,
        speculative: bool,
    ) -> CellSample:
        if batch_size > self.preset.max_batch_size:
            raise out_of_memory(
                f"batch size {batch_size} exceeds what {self.preset.name} fits "
                f"({self.preset.max_batch_size} sequences)"
            )
        self._calls += 1
        cell = profile_cell(
            self.preset,
            batch_size,
            k,
            steps=steps,
            seed=self.seed * 1_000_003 + self._calls,
            prompt=prompt_tokens or 0,
            speculative=speculative,
        )
        trace = cell.result.trace
        assert trace is not None  # profile_cell always traces
        pure = np.flatnonzero((trace.prefill_tokens == 0) & (trace.decode_seqs == batch_size))
        pure = pure[:steps]
        clean = trace.seconds[pure]
        seconds = clean
        if self.jitter > 0:
            seconds = clean * self._noise.lognormal(0.0, self.jitter, clean.size)
        # The run ends with its last measured step: warm-up and prefill before
        # it count, the simulator's spare steps after it do not.
        before = float(trace.seconds[: pure[-1] + 1].sum()) if pure.size else 0.0
        self.spent_seconds += before + float(seconds.sum() - clean.sum())
        reached, proposed, accepted, offered, scheduled = (
            tuple(int(x) for x in row[:k]) for row in cell.counts
        )
        return CellSample(
            batch_size=batch_size,
            k=k,
            step_seconds=tuple(float(s) for s in seconds),
            drafted=reached,
            accepted=accepted,
            proposed=proposed,
            offered=offered,
            scheduled=scheduled,
            sequence_steps=cell.sequence_steps,
            verified_tokens=cell.verified_tokens,
            context_tokens=cell.context_tokens,
        )

    def close(self) -> None:
        return None
