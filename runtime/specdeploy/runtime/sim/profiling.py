"""Profile a preset exhaustively, noise-free: the benchmarks' modelled profile of a preset.

Not the profiler's ``sim`` backend (``runtime/profiler/sim_backend.py``, which
``specdeploy profile --backend sim`` searches like a real engine, with step
noise): this is the reference the simulator benchmark derives its tables from.

For each batch size and K the engine runs a fixed-size batch (a closed loop
whose requests are long enough that nobody finishes while measured, all with
the same prompt length), skips the steps that still prefill, and records the
mean step time. Acceptance per position comes from the conditional
drafted/accepted counts the engine observed, exactly as the vLLM add-on
counts them. K=0 is measured with speculation configured (the drafter's K=0
cost included), because that is what a pod running the table pays at K=0.

The document says ``source: modelled`` and carries the preset's fingerprint
(engine ``vllm-sim``): a modelled profile is never mistaken for a measured one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specdeploy.runtime.goodput import acceptance_lengths
from specdeploy.runtime.policy.static import FixedPolicy
from specdeploy.runtime.profile import (
    Acceptance,
    Measurement,
    Metadata,
    ProfileSpec,
    Source,
    SpeculationProfile,
    parse_profile,
)
from specdeploy.runtime.sim.engine import SimResult, simulate
from specdeploy.runtime.sim.presets import Preset
from specdeploy.runtime.sim.workload import ClosedLoop, fixed

DEFAULT_BATCH_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class Cell:
    """One profiled (batch size, K) cell."""

    batch_size: int
    k: int
    itl_ms: float
    samples: int
    acceptance_length: float | None
    result: SimResult


def profile_cell(
    preset: Preset, batch_size: int, k: int, *, steps: int = 64, seed: int = 0, prompt: int = 0
) -> Cell:
    """Measure one cell: ``steps`` pure-decode steps of ``batch_size`` sequences at K=k."""
    prompt = prompt or max(1, round(preset.workload.prompt.mean))
    workload = ClosedLoop(batch_size, fixed(prompt), fixed(steps * (preset.max_k + 1) + 1024))
    config = preset.engine_config(max_batch_size=batch_size)
    warmup = -(-batch_size * prompt // config.max_batched_tokens) + 1
    result = simulate(
        config, workload, FixedPolicy(k), steps=steps + 2 * warmup + 2, seed=seed, trace=True
    )
    assert result.trace is not None
    tr = result.trace
    pure = np.flatnonzero((tr.prefill_tokens == 0) & (tr.decode_seqs == batch_size))[:steps]
    if pure.size == 0:
        raise RuntimeError(f"no pure decode step at batch size {batch_size}, K={k}")
    itl_ms = float(tr.seconds[pure].mean()) * 1e3
    al = None
    if k > 0:
        al = 1.0 + float(tr.accepted[pure].sum()) / float(tr.decode_seqs[pure].sum())
    return Cell(batch_size, k, itl_ms, int(pure.size), al, result)


def profile_preset(
    preset: Preset,
    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
    ks: Sequence[int] | None = None,
    *,
    steps: int = 64,
    seed: int = 0,
) -> SpeculationProfile:
    """A validated, modelled SpeculationProfile of ``preset``.

    ``ks`` defaults to 0..maxK; K=0 is always measured (the profile needs it
    at every batch size). Rows are sorted by (batch size, K).
    """
    grid = sorted({0, *(ks if ks is not None else range(preset.max_k + 1))})
    if grid[-1] > preset.max_k or grid[0] < 0:
        raise ValueError(f"ks must lie in 0..maxK={preset.max_k}, got {list(ks or [])}")
    sizes = sorted(set(batch_sizes))
    if not sizes or sizes[0] < 1:
        raise ValueError(f"batch sizes must be >= 1, got {list(batch_sizes)}")
    cells = [profile_cell(preset, bs, k, steps=steps, seed=seed) for bs in sizes for k in grid]
    positions = max(1, grid[-1])
    rates, samples = _acceptance(cells, positions, preset.acceptance.nominal())
    spec = ProfileSpec(
        fingerprint=preset.fingerprint(),
        source=Source.MODELLED,
        dataset=preset.dataset,
        measurements=tuple(
            Measurement(
                batch_size=c.batch_size,
                k=c.k,
                itl_ms=round(c.itl_ms, 4),
                acceptance_length=None
                if c.acceptance_length is None
                else round(c.acceptance_length, 4),
                samples=c.samples,
            )
            for c in cells
        ),
        acceptance=Acceptance(per_position=rates, samples=samples),
    )
    doc = SpeculationProfile(
        metadata=Metadata(
            name=spec.fingerprint.profile_name(),
            labels={"specdeploy.io/source": "modelled"},
            annotations={"specdeploy.io/sim-preset": preset.name},
        ),
        spec=spec,
    )
    return parse_profile(doc.to_document(), source=f"modelled profile of {preset.name}")


def _acceptance(
    cells: Sequence[Cell], positions: int, prior: Sequence[float]
) -> tuple[tuple[float, ...], int]:
    """Conditional acceptance per position pooled over all cells (prior where none)."""
    drafted = np.zeros(positions, dtype=np.int64)
    accepted = np.zeros(positions, dtype=np.int64)
    for c in cells:
        n = min(positions, c.result.drafted.size)
        drafted[:n] += c.result.drafted[:n]
        accepted[:n] += c.result.accepted[:n]
    rates = []
    for i in range(positions):
        fallback = prior[i] if i < len(prior) else 0.0
        rates.append(round(float(accepted[i] / drafted[i]), 4) if drafted[i] else fallback)
    return tuple(rates), int(drafted[0]) if positions else 0


def modelled_best_k(
    preset: Preset,
    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
    *,
    context: float | None = None,
) -> dict[int, int]:
    """argmax_K AL(K)/ITL(bs, K) per batch size from the cost model directly.

    Uses the preset's nominal acceptance and pure decode steps at the
    workload's mean context: the analytic answer the profiles approximate.
    """
    ctx = preset.mean_context if context is None else context
    al = acceptance_lengths(preset.acceptance.nominal(), preset.max_k)
    best: dict[int, int] = {}
    for bs in batch_sizes:
        goodput = [
            al[k] / preset.cost.decode_itl(bs, k, context=ctx) for k in range(preset.max_k + 1)
        ]
        best[bs] = int(np.argmax(goodput))
    return best
