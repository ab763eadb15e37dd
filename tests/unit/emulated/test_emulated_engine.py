"""The engine in-process: continuous batching, step costs, what the add-on is fed."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from e2e.emulated.drafting import DraftSampler
from e2e.emulated.engine import MAX_LAG_S, Engine, EngineLimits, NewRequest, Sequence
from e2e.emulated.ksource import FixedK, Vanilla
from e2e.emulated.vllm_metrics import VllmMetrics
from e2e.emulated.workloads import Workload, class_models
from specdeploy.runtime.sim.presets import get_preset
from specdeploy.runtime.vllm_addon.k0_pass import PassLedger
from specdeploy.runtime.vllm_addon.steps import StepReading

PRESET = get_preset("llama8b-eagle3-h200")
CLASSES = tuple(Workload)
SCALE = 0.01


@dataclass
class Recording:
    """A K source that hands out fixed K and keeps what the engine tells it."""

    k: int
    speculative: bool = True
    piecewise: bool = True
    plain_k0: bool = False
    k0_ledger: PassLedger | None = None
    seen: list[tuple[int, int, float | None, StepReading]] = field(default_factory=list)

    @property
    def max_k(self) -> int:
        return self.k

    def choose(self, batch_size: int) -> int:
        return self.k

    def observe(self, batch_size: int, k: int, seconds: float | None, reading: StepReading) -> None:
        self.seen.append((batch_size, k, seconds, reading))

    def close(self) -> None:
        return None

    def describe(self) -> str:
        return "recording"


def engine(ks: object, *, kv_max_seqs: int = 256, scale: float = SCALE) -> Engine:
    models = class_models(PRESET)
    return Engine(
        cost=PRESET.cost,
        ksource=ks,  # type: ignore[arg-type]
        sampler=DraftSampler([models[w] for w in CLASSES], 256, seed=0),
        metrics=VllmMetrics("m", max_model_len=8192, num_spec_tokens=5),
        limits=EngineLimits(256, 8192, kv_max_seqs),
        output_lengths=PRESET.workload.output,
        time_scale=scale,
    )


def request(
    tokens: int, *, prompt: int = 20, ignore_eos: bool = True, workload: int = 0
) -> NewRequest:
    return NewRequest(prompt, tokens, ignore_eos, 0, workload, tokens)


async def finish(seqs: list[Sequence]) -> list[tuple[int, str]]:
    """(tokens, finish reason) of each request, from its event queue."""
    out = []
    for seq in seqs:
        tokens, reason = 0, None
        while reason is None:
            event = await seq.events.get()
            tokens += event.tokens
            reason = event.finish_reason
        out.append((tokens, reason))
    return out


def run(e: Engine, requests: list[NewRequest]) -> list[tuple[int, str]]:
    async def go() -> list[tuple[int, str]]:
        task = asyncio.create_task(e.run())
        try:
            seqs = [e.submit(r) for r in requests]
            return await asyncio.wait_for(finish(seqs), timeout=60)
        finally:
            task.cancel()

    return asyncio.run(go())


def test_requests_get_exactly_max_tokens_with_ignore_eos_and_share_steps() -> None:
    e = engine(Vanilla())
    got = run(e, [request(40) for _ in range(8)])
    assert got == [(40, "length")] * 8
    # continuous batching: 8 x 40 tokens in about 40 steps (one prefill step ahead), not 320
    assert e.steps <= 42


def test_speculation_needs_fewer_steps_than_tokens() -> None:
    e = engine(FixedK(3))
    assert run(e, [request(200)]) == [(200, "length")]
    assert e.steps < 200 / 1.8  # AL(3) of the EAGLE-3 curve is ~2.9


def test_natural_lengths_stop_before_max_tokens() -> None:
    e = engine(Vanilla())
    got = run(e, [request(5000, ignore_eos=False) for _ in range(5)])
    assert {reason for _, reason in got} == {"stop"}
    assert all(1 <= n <= 1024 for n, _ in got)  # MT-Bench's output lengths are capped at 1024


def test_steps_take_at_least_their_modelled_time() -> None:
    e = engine(FixedK(3), scale=0.2)
    started = time.monotonic()
    run(e, [request(60) for _ in range(4)])
    wall = time.monotonic() - started
    assert wall >= e.modelled_seconds * 0.2 - MAX_LAG_S
    assert e.modelled_seconds > 0


def test_the_kv_limit_makes_requests_wait() -> None:
    e = engine(Vanilla(), kv_max_seqs=2)
    got = run(e, [request(10) for _ in range(4)])
    assert got == [(10, "length")] * 4
    assert e.steps >= 2 * 10  # two at a time


def test_the_addon_gets_vllms_step_readings() -> None:
    ks = Recording(k=3)
    e = engine(ks)
    run(e, [request(30), request(30, workload=CLASSES.index(Workload.RANDOM))])
    assert ks.seen
    prefill, *decode = ks.seen
    assert prefill[2] is None and prefill[3].requests == ()  # a prefill step is never clean
    timed = [s[2] for s in decode if s[2] is not None]
    assert timed and min(timed) > 0  # modelled seconds of clean decode steps
    for batch_size, k, _, reading in decode:
        assert k == 3 and reading.k == 3
        assert len(reading.requests) <= batch_size
        assert all(kk == 3 and 0 <= a <= n <= 3 for kk, n, a in reading.requests)
        assert reading.verified_tokens == sum(1 + n for _, n, _ in reading.requests)
        assert reading.context_tokens >= 20 * len(reading.requests)


def test_with_the_addons_plugin_a_k0_step_costs_plain_plus_the_heads_timed_pass(
    tmp_path: Path,
) -> None:
    """The add-on's pods run its vLLM plugin: K=0 steps pay no speculation overheads,
    only the EAGLE head's K=0 pass, which the worker times into the add-on's ledger on
    decode-only steps (``vllm_addon.k0_pass``); without the plugin (vLLM's own lookup)
    nothing is timed."""
    ledger = PassLedger(str(tmp_path / "l.f64"), create=True)
    plugged = Recording(k=0, plain_k0=True, k0_ledger=ledger)
    e = engine(plugged)
    run(e, [request(30) for _ in range(4)])
    clean = [s for s in plugged.seen if s[2] is not None]
    assert clean
    batch_size, _, last, reading = clean[-1]
    assert last is not None
    ctx = reading.context_tokens
    vanilla = PRESET.cost.step_seconds(batch_size, 0, context_tokens=ctx, speculative=False)
    timed = PRESET.cost.k0_pass_seconds(batch_size, batch_size, ctx)
    assert last == pytest.approx(vanilla + timed, rel=1e-3)
    seconds = sum(t for t, _ in ledger.totals().values())
    passes = sum(n for _, n in ledger.totals().values())
    assert passes >= len(clean) and 0 < seconds / passes < 0.2 * last

    own = Recording(k=0)
    run(engine(own), [request(30) for _ in range(4)])
    k0_own = [s for s in own.seen if s[2] is not None][-1][2]
    assert k0_own is not None and k0_own > last, "vLLM's own K=0 step costs more"


def test_an_aborted_request_finishes_with_abort_and_frees_its_slot() -> None:
    e = engine(Vanilla(), kv_max_seqs=1)

    async def go() -> list[tuple[int, str]]:
        task = asyncio.create_task(e.run())
        try:
            first, second = e.submit(request(100_000)), e.submit(request(5))
            await asyncio.sleep(0.05)
            e.abort(first)
            return await asyncio.wait_for(finish([first, second]), timeout=30)
        finally:
            task.cancel()

    (n_first, why_first), second = asyncio.run(go())
    assert why_first == "abort" and n_first < 100_000
    assert second == (5, "length")
    assert not e.busy


@pytest.mark.parametrize("scale", [0.0, -1.0])
def test_a_time_scale_must_be_positive(scale: float) -> None:
    with pytest.raises(ValueError, match="time_scale"):
        engine(Vanilla(), scale=scale)
