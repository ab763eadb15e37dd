"""Putting the add-on together for one engine: settings → metrics, controller, watcher.

Kept apart from ``scheduler.py`` (which imports vLLM) so that the whole wiring
is exercised by unit tests without vLLM; the scheduler passes in only the
numbers vLLM fixed at start.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial

from specdeploy.runtime.vllm_addon import k0_pass
from specdeploy.runtime.vllm_addon.controller import KController
from specdeploy.runtime.vllm_addon.metrics import AddonMetrics
from specdeploy.runtime.vllm_addon.self_time import SelfTimer
from specdeploy.runtime.vllm_addon.settings import AddonSettings
from specdeploy.runtime.vllm_addon.table_source import EngineShape, LoadedTable, load_table
from specdeploy.runtime.vllm_addon.watcher import TableWatcher

log = logging.getLogger("specdeploy.addon")


class AddonRefused(RuntimeError):
    """The engine's configuration is one the add-on cannot serve safely."""


@dataclass
class Addon:
    """The running parts of the add-on in one engine."""

    controller: KController
    metrics: AddonMetrics
    watcher: TableWatcher | None
    server: object | None

    def close(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
        shutdown = getattr(self.server, "shutdown", None)
        if shutdown is not None:
            shutdown()


def ensure_logging() -> None:
    """Make the add-on's INFO lines visible in the engine-core process's stderr."""
    logger = logging.getLogger("specdeploy")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(asctime)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


def start_addon(
    settings: AddonSettings,
    vllm_lookup: list[int],
    *,
    num_speculative_tokens: int,
    data_parallel_size: int = 1,
    watch: bool = True,
    timer: SelfTimer | None = None,
    environ: Mapping[str, str] | None = None,
) -> Addon:
    """Build and start the add-on for an engine whose lookup vLLM built as ``vllm_lookup``.

    ``timer`` (``self_time``): export the add-on's own time and time the watcher's checks.
    ``environ`` (default the process's) names the drafter's K=0 pass ledger (``k0_pass``).
    """
    if data_parallel_size > 1 and settings.policy != "off":
        raise AddonRefused(
            f"specdeploy: data_parallel_size={data_parallel_size} is not supported: ranks "
            "choosing K on their own could pick different K and deadlock. Run one "
            "replica per data-parallel rank, or set SPECDEPLOY_POLICY=off."
        )
    started_with = set(vllm_lookup[1:]) or {vllm_lookup[0]}
    allowed = settings.allowed_k_values(started_with, num_speculative_tokens)
    if not allowed:
        raise AddonRefused(
            f"specdeploy: SPECDEPLOY_ALLOWED_K={settings.allowed_k!r} leaves no K in "
            f"0..{num_speculative_tokens}"
        )
    shape = EngineShape(
        num_speculative_tokens=num_speculative_tokens,
        max_batch_size=len(vllm_lookup) - 1,
        allowed_k=tuple(sorted(allowed)),
    )
    metrics = AddonMetrics(settings.pool, num_speculative_tokens)
    if timer is not None:
        timer.register(metrics.registry)
    k0_series = k0_pass.series_for(settings.pool, environ)
    if k0_series is not None:  # the plugin shares the worker's K=0 pass times (k0_pass)
        metrics.registry.register(k0_series)
    controller = KController(vllm_lookup, shape, metrics)
    server = _serve_metrics(metrics, settings)
    log.info(
        "specdeploy: add-on on, policy %s, K set %s, max batch size %d, table %s",
        settings.policy,
        list(shape.allowed_k),
        shape.max_batch_size,
        settings.table_file or "none (vLLM's own schedule)",
    )
    watcher = None
    if settings.table_file is not None:
        load = partial(_load, shape=shape, settings=settings)
        watcher = TableWatcher(
            settings.table_file,
            settings.profile_path,
            load,
            controller.install,
            controller.rejected,
            settings.reload_seconds,
            on_checked=None if timer is None else timer.watcher_checked,
        )
        if watch:
            watcher.start()
        else:
            watcher.check()
    return Addon(controller, metrics, watcher, server)


def _load(
    table: bytes, profile: bytes | None, *, shape: EngineShape, settings: AddonSettings
) -> LoadedTable:
    return load_table(
        table,
        profile,
        shape,
        default_policy=settings.policy,
        adaptive=settings.adaptive,
        table_name=str(settings.table_file),
        profile_name=str(settings.profile_path),
    )


def _serve_metrics(metrics: AddonMetrics, settings: AddonSettings) -> object | None:
    if not settings.metrics_port:
        return None
    try:
        server: object = metrics.serve(settings.metrics_port, settings.metrics_addr)
    except OSError as err:  # a busy port must not stop serving
        log.warning(
            "specdeploy: metrics endpoint %s:%d not started: %s",
            settings.metrics_addr,
            settings.metrics_port,
            err,
        )
        return None
    log.info("specdeploy: metrics on %s:%d", settings.metrics_addr, settings.metrics_port)
    return server
