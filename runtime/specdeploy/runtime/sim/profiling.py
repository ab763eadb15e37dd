"""Profile a preset exhaustively, noise-free: the benchmarks' modelled profile of a preset.

Not the profiler's ``sim`` backend (``runtime/profiler/sim_backend.py``, which
``specdeploy profile --backend sim`` searches like a real engine, with step
noise): this is the reference the simulator benchmark derives its tables from.

For each batch size, K and context length the engine runs a fixed-size
batch (a closed loop whose requests are long enough that nobody finishes
while measured, all with the same prompt length), skips the steps that
still prefill, and records the mean step time, the tokens verified and the
context read per sequence, and the drafting rate. Step cost grows with the
context (KV reads), so every batch size is measured at a short, a medium
and a long context (``CONTEXT_FACTORS`` of the preset's mean context): the
cost model (``cost.py``) needs the spread to separate the KV cost from the
fixed cost. K cells run with a K table set (piecewise CUDA graphs, the
drafter's K=0 pass included), because that is what a pod serving the table
pays; the ``baseline`` is plain decoding with no speculation configured, the
floor that only turning speculation off reaches.

Acceptance per position pools every cell's counts with one definition
(``goodput.reached_counts``): a_i = accepted/reached, the drafting rate
q_i = proposed/reached and the proposal survival s_i = offered/scheduled,
with the counts kept in the document.

The document says ``source: modelled`` and carries the preset's fingerprint
(engine ``vllm-sim``): a modelled profile is never mistaken for a measured one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specdeploy.runtime.goodput import acceptance_lengths, verified_per_sequence
from specdeploy.runtime.policy.static import FixedPolicy
from specdeploy.runtime.profile import (
    Acceptance,
    Baseline,
    Measurement,
    Metadata,
    ProfileSpec,
    Source,
    SpeculationProfile,
    parse_profile,
)
from specdeploy.runtime.sim.engine import IntArray, SimResult, simulate
from specdeploy.runtime.sim.presets import Preset
from specdeploy.runtime.sim.workload import ClosedLoop, fixed

DEFAULT_BATCH_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
CONTEXT_FACTORS: tuple[float, ...] = (0.25, 1.0, 1.75)
"""Short, medium and long prompts as multiples of the preset's mean context."""


@dataclass(frozen=True)
class Cell:
    """One profiled (batch size, K, context) cell: means over its pure decode steps."""

    batch_size: int
    k: int
    itl_ms: float
    samples: int
    acceptance_length: float | None
    verified_per_sequence: float
    context_per_sequence: float
    drafting_rate: float | None
    """Share of sequence-steps with a draft at position 1 (None at K=0)."""
    counts: IntArray
    """Reached, proposed, accepted, offered, scheduled per position over the measured steps."""
    sequence_steps: int
    verified_tokens: int
    context_tokens: int
    """Totals over the measured steps."""
    result: SimResult


def profile_cell(
    preset: Preset,
    batch_size: int,
    k: int,
    *,
    steps: int = 64,
    seed: int = 0,
    prompt: int = 0,
    speculative: bool = True,
) -> Cell:
    """Measure one cell: ``steps`` pure-decode steps of ``batch_size`` sequences at K=k.

    ``prompt`` sets the context the cell starts from (default: the preset's
    mean prompt). ``speculative`` False measures plain decoding (K must be
    0); otherwise a K table is set and the add-on's plugin loaded, as in a
    pod serving one (the profiler's engine loads it: ``SPECDEPLOY_PLAIN_K0``).
    """
    if not speculative and k != 0:
        raise ValueError("plain decoding verifies no drafts: k must be 0")
    prompt = prompt or max(1, round(preset.workload.prompt.mean))
    workload = ClosedLoop(batch_size, fixed(prompt), fixed(steps * (preset.max_k + 1) + 1024))
    config = preset.engine_config(
        max_batch_size=batch_size,
        speculative=speculative,
        piecewise=speculative,
        plain_k0=speculative,
    )
    # Decoding sequences shrink the prefill budget as they start: twice the bare count.
    prefill_steps = -(-batch_size * prompt // config.max_batched_tokens) + 1
    result = simulate(
        config,
        workload,
        FixedPolicy(k) if speculative else None,
        steps=steps + 2 * prefill_steps + 2,
        seed=seed,
        trace=True,
    )
    assert result.trace is not None
    tr = result.trace
    pure = np.flatnonzero((tr.prefill_tokens == 0) & (tr.decode_seqs == batch_size))[:steps]
    if pure.size == 0:
        raise RuntimeError(f"no pure decode step at batch size {batch_size}, K={k}")
    seq_steps = int(tr.decode_seqs[pure].sum())
    counts: IntArray = tr.counts[pure].sum(axis=0)
    verified, context = int(tr.verified[pure].sum()), int(tr.context[pure].sum())
    al = rate = None
    if k > 0:
        al = 1.0 + float(tr.accepted[pure].sum()) / seq_steps
        rate = float(counts[1, 0]) / float(counts[4, 0])
    return Cell(
        batch_size=batch_size,
        k=k,
        itl_ms=float(tr.seconds[pure].mean()) * 1e3,
        samples=int(pure.size),
        acceptance_length=al,
        verified_per_sequence=verified / seq_steps,
        context_per_sequence=context / seq_steps,
        drafting_rate=rate,
        counts=counts,
        sequence_steps=seq_steps,
        verified_tokens=verified,
        context_tokens=context,
        result=result,
    )


def context_prompts(preset: Preset, factors: Sequence[float] = CONTEXT_FACTORS) -> list[int]:
    """The prompt lengths of the context axis (distinct, ascending)."""
    return sorted({max(1, round(preset.mean_context * f)) for f in factors})


def profile_preset(
    preset: Preset,
    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
    ks: Sequence[int] | None = None,
    *,
    steps: int = 64,
    seed: int = 0,
    contexts: Sequence[float] = CONTEXT_FACTORS,
) -> SpeculationProfile:
    """A validated, modelled SpeculationProfile of ``preset``.

    ``ks`` defaults to 0..maxK; K=0 is always measured (the profile needs it
    at every batch size). ``contexts`` are the context axis as multiples of
    the preset's mean context. Rows are sorted by (batch size, K, context).
    """
    grid = sorted({0, *(ks if ks is not None else range(preset.max_k + 1))})
    if grid[-1] > preset.max_k or grid[0] < 0:
        raise ValueError(f"ks must lie in 0..maxK={preset.max_k}, got {list(ks or [])}")
    sizes = sorted(set(batch_sizes))
    if not sizes or sizes[0] < 1:
        raise ValueError(f"batch sizes must be >= 1, got {list(batch_sizes)}")
    if not contexts or any(f <= 0 for f in contexts):
        raise ValueError(f"contexts must be > 0, got {list(contexts)}")
    prompts = context_prompts(preset, contexts)
    # Each cell draws its own acceptance (a seed per cell), as separate runs would.
    plan = [(bs, k, prompt) for bs in sizes for k in grid for prompt in prompts]
    cells = [
        profile_cell(preset, bs, k, steps=steps, seed=seed * 1_000_003 + i, prompt=prompt)
        for i, (bs, k, prompt) in enumerate(plan)
    ]
    cells.sort(key=lambda c: (c.batch_size, c.k, c.context_per_sequence))
    reference = float(np.mean([c.context_per_sequence for c in cells]))
    baseline_prompt = max(1, round(reference - steps / 2.0))
    baseline = [
        profile_cell(
            preset, bs, 0, steps=steps, seed=seed, prompt=baseline_prompt, speculative=False
        )
        for bs in sizes
    ]
    spec = ProfileSpec(
        fingerprint=preset.fingerprint(),
        source=Source.MODELLED,
        dataset=preset.dataset,
        measurements=tuple(_measurement(c) for c in cells),
        acceptance=_acceptance(cells, max(1, grid[-1]), preset.nominal_rates()),
        baseline=tuple(
            Baseline(
                batch_size=c.batch_size,
                itl_ms=round(c.itl_ms, 4),
                samples=c.samples,
                context_tokens=round(c.context_per_sequence, 1),
            )
            for c in baseline
        ),
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


def _measurement(c: Cell) -> Measurement:
    return Measurement(
        batch_size=c.batch_size,
        k=c.k,
        itl_ms=round(c.itl_ms, 4),
        acceptance_length=None if c.acceptance_length is None else round(c.acceptance_length, 4),
        samples=c.samples,
        verified_tokens=round(c.verified_per_sequence, 4),
        context_tokens=round(c.context_per_sequence, 1),
        drafting_rate=None if c.drafting_rate is None else round(c.drafting_rate, 4),
    )


def _acceptance(cells: Sequence[Cell], positions: int, prior: Sequence[float]) -> Acceptance:
    """Counts pooled over all cells; rates from them (the prior where nothing was reached)."""
    counts = np.zeros((5, positions), dtype=np.int64)
    for c in cells:
        n = min(positions, c.counts.shape[1])
        counts[:, :n] += c.counts[:, :n]
    reached, proposed, accepted, offered, scheduled = counts

    def rates(num: IntArray, den: IntArray, fallback: Sequence[float]) -> tuple[float, ...]:
        return tuple(
            round(float(num[i] / den[i]), 4) if den[i] else float(fallback[i])
            for i in range(positions)
        )

    padded = [*prior, *([0.0] * positions)]
    return Acceptance(
        per_position=rates(accepted, reached, padded),
        samples=int(reached[0]),
        drafting_rate=rates(proposed, reached, [1.0] * positions),
        proposal_survival=rates(offered, scheduled, [1.0] * positions),
        reached=tuple(int(x) for x in reached),
        proposed=tuple(int(x) for x in proposed),
        accepted=tuple(int(x) for x in accepted),
    )


def modelled_best_k(
    preset: Preset,
    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
    *,
    context: float | None = None,
) -> dict[int, int]:
    """argmax_K AL(K)/ITL(bs, K) per batch size from the cost model directly.

    Uses the preset's nominal acceptance (a missing draft a rejection), the
    expected verified tokens of its proposal model and pure decode steps at
    the workload's mean context: the analytic answer the profiles
    approximate.
    """
    return {
        bs: ranking[0][0]
        for bs, ranking in modelled_ranking(preset, batch_sizes, context=context).items()
    }


def modelled_ranking(
    preset: Preset,
    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
    *,
    context: float | None = None,
) -> dict[int, list[tuple[int, float]]]:
    """Per batch size, (K, goodput in tokens/s per sequence) best first (``modelled_best_k``)."""
    ctx = preset.mean_context if context is None else context
    al = acceptance_lengths(preset.nominal_rates(), preset.max_k)
    survival = preset.proposal_model.survival(preset.max_k)
    out: dict[int, list[tuple[int, float]]] = {}
    for bs in batch_sizes:
        goodput = [
            (
                k,
                float(al[k])
                / preset.cost.decode_itl(
                    bs, k, context=ctx, verified_per_sequence=verified_per_sequence(survival, k)
                ),
            )
            for k in range(preset.max_k + 1)
        ]
        out[bs] = sorted(goodput, key=lambda kg: (-kg[1], kg[0]))
    return out
