"""The emulated vLLM server's life: build, load, serve, drain on SIGTERM, exit.

1. Build what vLLM builds at engine start: the preset on the node's GPU
   (``catalog``), the K source (the real add-on when the pod asks for it:
   ``ksource``), the engine and vLLM's metrics. A configuration vLLM would
   refuse ends the process here with exit code 1 and a message.
2. Bind ``--port`` on 127.0.0.1 and say plainly, in one log line, that this
   is an EMULATED vLLM and what it models. ``/health`` answers 503 during
   the "model load" delay (``SPECDEPLOY_EMULATED_LOAD_SECONDS``), then 200.
3. On SIGTERM or SIGINT: ``/health`` and new requests get 503, requests in
   flight run to completion for up to ``--shutdown-timeout`` seconds (0:
   abort them at once, vLLM's ``abort`` mode), what is left is aborted
   (``finish_reason`` ``abort``), the add-on is closed, exit code 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass

from aiohttp import web

from e2e.emulated.api import Api, State
from e2e.emulated.args import ArgsError, ServeArgs
from e2e.emulated.catalog import Match, emulated_preset
from e2e.emulated.config import GPU, PRESET, EmulatorConfig, EmulatorConfigError
from e2e.emulated.drafting import DraftSampler
from e2e.emulated.engine import Engine, EngineLimits
from e2e.emulated.ksource import LOOPBACK, KSource, build_ksource
from e2e.emulated.vllm_metrics import VllmMetrics
from e2e.emulated.workloads import Workload, class_models
from specdeploy.runtime.sim.presets import Preset
from specdeploy.runtime.vllm_addon.assembly import AddonRefused
from specdeploy.runtime.vllm_addon.settings import SettingsError

log = logging.getLogger("specdeploy.emulated")

ABORT_GRACE_S = 2.0
"""After aborting what the drain left, how long handlers get to send their last bytes."""


class StartError(RuntimeError):
    """The server cannot start as configured (the message says why)."""


@dataclass
class Built:
    preset: Preset
    match: Match
    ksource: KSource
    engine: Engine
    api: Api
    config: EmulatorConfig


def build(args: ServeArgs, environ: Mapping[str, str]) -> Built:
    """Everything but the HTTP listener (module docstring, step 1)."""
    try:
        config = EmulatorConfig.from_env(environ)
    except EmulatorConfigError as err:
        raise StartError(str(err)) from None
    method = args.speculation.method if args.speculation else None
    try:
        preset, match = emulated_preset(args.model, method, config.gpu, config.preset)
    except KeyError as err:
        raise StartError(
            f"the simulator cannot emulate this pod ({GPU}={config.gpu!r}, "
            f"{PRESET}={config.preset!r}): {err.args[0]}"
        ) from None
    try:
        ksource = build_ksource(args, environ)
    except (ArgsError, SettingsError, AddonRefused) as err:
        raise StartError(str(err)) from None
    workloads = tuple(Workload)
    models = class_models(preset)
    metrics = VllmMetrics(
        args.served_name,
        max_model_len=args.max_model_len,
        num_spec_tokens=ksource.max_k if args.speculation else None,
    )
    engine = Engine(
        cost=preset.cost,
        ksource=ksource,
        sampler=DraftSampler([models[w] for w in workloads], args.max_num_seqs, args.seed),
        metrics=metrics,
        limits=EngineLimits(args.max_num_seqs, args.max_num_batched_tokens, preset.max_batch_size),
        output_lengths=preset.workload.output,
        seed=args.seed,
        time_scale=config.time_scale,
    )
    return Built(preset, match, ksource, engine, Api(args, engine, metrics, workloads), config)


def banner(args: ServeArgs, built: Built) -> str:
    """The startup line: what is emulated, on what, and where it listens."""
    p = built.preset
    return (
        f"EMULATED vLLM {args.model} (no GPU, no model weights): simulator preset "
        f"{p.name} ({built.match.rule}) on GPU {p.gpu.product} x{p.tp}, modelled timings "
        f"(time scale {built.config.time_scale:g}); K: {built.ksource.describe()}; "
        f"serving {', '.join(args.served_model_names)} on http://{LOOPBACK}:{args.port}"
    )


async def serve(args: ServeArgs, environ: Mapping[str, str] | None = None) -> int:
    """Run until SIGTERM/SIGINT; the process's exit code."""
    env = os.environ if environ is None else environ
    try:
        built = build(args, env)
    except StartError as err:
        log.error("EMULATED vLLM: cannot start: %s", err)
        return 1
    _notes(args, built)
    api, engine = built.api, built.engine
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    runner = web.AppRunner(api.app(), handler_cancellation=True, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, LOOPBACK, args.port).start()
    except OSError as err:
        log.error("EMULATED vLLM: cannot listen on %s:%d: %s", LOOPBACK, args.port, err)
        await runner.cleanup()
        built.ksource.close()
        return 1
    log.info("%s", banner(args, built))
    engine_task = asyncio.create_task(engine.run(), name="emulated-engine")
    engine_task.add_done_callback(lambda t: _engine_ended(t, api))
    try:
        await _load(built.config.load_seconds, stop, api)
        await stop.wait()
        await _drain(api, engine, args.shutdown_timeout)
    finally:
        engine_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await engine_task
        await runner.cleanup()
        built.ksource.close()
    log.info(
        "EMULATED vLLM: stopped after %d steps, %.2f modelled GPU seconds (host behind by %.2f s)",
        engine.steps,
        engine.modelled_seconds,
        engine.behind_s,
    )
    return 0


def _notes(args: ServeArgs, built: Built) -> None:
    if args.ignored:
        log.info("EMULATED vLLM: ignoring arguments it does not model: %s", " ".join(args.ignored))
    if args.tensor_parallel_size != built.preset.tp:
        log.info(
            "EMULATED vLLM: --tensor-parallel-size=%d, but the preset (and its profile) "
            "model TP=%d: the preset's is used",
            args.tensor_parallel_size,
            built.preset.tp,
        )


async def _load(seconds: float, stop: asyncio.Event, api: Api) -> None:
    """The "model load": /health 503 for ``seconds``, then serving (unless stopped first)."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    if not stop.is_set() and api.state is State.STARTING:
        api.state = State.SERVING
        log.info("EMULATED vLLM: ready (/health 200)")


async def _drain(api: Api, engine: Engine, timeout: int) -> None:
    """Refuse new work, let what is in flight finish for up to ``timeout`` s, abort the rest."""
    if api.state is not State.FAILED:
        api.state = State.DRAINING
    left = len(engine.running) + len(engine.waiting)
    log.info(
        "EMULATED vLLM: shutting down, %d request(s) in flight, drain timeout %ds", left, timeout
    )
    done = asyncio.ensure_future(_all_done(api, engine))
    try:
        await asyncio.wait_for(asyncio.shield(done), timeout=timeout if timeout > 0 else 0.001)
        return
    except TimeoutError:
        pass
    aborted = [*engine.running, *engine.waiting]
    for seq in aborted:
        engine.abort(seq)
    if aborted:
        log.warning("EMULATED vLLM: drain timed out, aborted %d request(s)", len(aborted))
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(done, timeout=ABORT_GRACE_S)


async def _all_done(api: Api, engine: Engine) -> None:
    await engine.wait_idle()
    await api.wait_quiet()


def _engine_ended(task: asyncio.Task[None], api: Api) -> None:
    if task.cancelled():
        return
    err = task.exception()
    if err is not None:
        api.state = State.FAILED
        log.error("EMULATED vLLM: the engine loop failed: %r", err, exc_info=err)
        engine = api.engine
        for seq in [*engine.running, *engine.waiting]:
            with contextlib.suppress(Exception):
                engine.abort(seq)
