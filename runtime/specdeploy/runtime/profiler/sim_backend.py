"""The ``sim`` profiler backend: a simulator preset measured like a GPU.

Each ``measure`` call runs ``profile_cell`` (runtime/sim/profiling.py), the
same fixed-size-batch experiment the simulator's own profiler runs: a
closed loop of ``batch_size`` long requests, prefill steps skipped, the
pure decode steps returned. Every call uses a fresh seed, so repeats draw
fresh acceptance.

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

    def __init__(self, preset: Preset, *, seed: int = 0, jitter: float = DEFAULT_JITTER) -> None:
        if jitter < 0:
            raise ValueError(f"jitter must be >= 0, got {jitter}")
        self.preset = preset
        self.seed = seed
        self.jitter = jitter
        self._noise = np.random.default_rng(np.random.SeedSequence([seed, 0x5EED]))
        self._calls = 0
        self.spent_seconds = 0.0
        """Simulated engine seconds over every call, warm-up included."""

    def fingerprint(self) -> Fingerprint:
        return self.preset.fingerprint()

    def measure(self, batch_size: int, k: int, steps: int) -> CellSample:
        """``steps`` pure decode steps of ``batch_size`` sequences at K=k."""
        if batch_size > self.preset.max_batch_size:
            raise out_of_memory(
                f"batch size {batch_size} exceeds what {self.preset.name} fits "
                f"({self.preset.max_batch_size} sequences)"
            )
        self._calls += 1
        cell = profile_cell(
            self.preset, batch_size, k, steps=steps, seed=self.seed * 1_000_003 + self._calls
        )
        result = cell.result
        assert result.trace is not None  # profile_cell always traces
        pure = np.flatnonzero(
            (result.trace.prefill_tokens == 0) & (result.trace.decode_seqs == batch_size)
        )[:steps]
        clean = result.trace.seconds[pure]
        seconds = clean
        if self.jitter > 0:
            seconds = clean * self._noise.lognormal(0.0, self.jitter, clean.size)
        # The run ends with its last measured step: warm-up and prefill before
        # it count, the simulator's spare steps after it do not.
        before = float(result.trace.seconds[: pure[-1] + 1].sum()) if pure.size else 0.0
        self.spent_seconds += before + float(seconds.sum() - clean.sum())
        return CellSample(
            batch_size=batch_size,
            k=k,
            step_seconds=tuple(float(s) for s in seconds),
            drafted=tuple(int(d) for d in result.drafted[:k]),
            accepted=tuple(int(a) for a in result.accepted[:k]),
        )

    def close(self) -> None:
        return None
