"""The drafter's K=0 pass, timed in the worker and exported by the add-on: a live plain step.

With the plugin (``plain_step``) a K=0 step costs what a plain step costs,
except for a stateful drafter's K=0 pass: EAGLE, EAGLE-3 and draft models
run their drafter once per step at K=0 to keep its KV cache in step with
the target's tokens (measured 2.1-3.4 ms on the CPU engine,
``bench/results/k0_anatomy.md``). So a pod's clean K=0 steps minus that
pass are plain-decoding steps of this very pod, at the batch sizes it
serves: the live plain-decoding reference the operator's floor needs
(issue 31), which a profile's plain and K=0 cells give only with their
measurement noise, and a speculating pod never runs a plain step to time.

The pass runs in the worker; the add-on's metrics live in the engine core,
another process. So the worker adds each pass to a ledger, a small file of
float64 pairs (seconds, passes) per batch-size bucket mapped into memory,
and the add-on's collector reads it when scraped:

* ``specdeploy_drafter_k0_pass_seconds_total{pool,batch_bucket}``
* ``specdeploy_drafter_k0_passes_total{pool,batch_bucket}``

Only decode-only steps are timed (every request scheduled one new token
plus its drafts), the steps the add-on's step-time histogram counts as
clean; the bucket is the step's number of requests, as the add-on's. On a
CPU device the pass runs synchronously and the process clock times it. On
a GPU its kernels are queued asynchronously, so the process clock would
time their launch: there a pair of CUDA events brackets the pass and is
read a step or more later, once the GPU has run it (``CudaClock``; no
synchronisation is added). That path is unit-tested on stand-ins only: no
GPU has run it yet. One writer per engine: tensor-parallel ranks other
than the first do not write.

The ledger's path is ``SPECDEPLOY_K0_PASS_FILE``: the first vLLM process of
an engine sets it (the plugin's ``register``) and the processes it starts
inherit it. The file is never truncated: an engine restarted in the same
process continues its counters.
"""

from __future__ import annotations

import mmap
import os
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from pathlib import Path
from typing import Any

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from specdeploy.runtime.contract import Series, SeriesLabel, bucket_label, bucket_of

LEDGER_ENV = "SPECDEPLOY_K0_PASS_FILE"
"""Where the engine's processes share the ledger (set by the first of them)."""
BUCKETS = 24
"""Batch-size buckets kept: up to 2**23 requests per step, far beyond any engine."""
_FLOAT = 8
_SIZE = BUCKETS * 2 * _FLOAT


def claim_path(environ: MutableMapping[str, str] | None = None) -> str:
    """The ledger's path for this engine: the inherited one, or a new one set for children.

    In memory (``/dev/shm``, the pod's memory-backed volume) where there is
    one, else the temporary directory; named after the first process.
    """
    env = os.environ if environ is None else environ
    current = env.get(LEDGER_ENV, "").strip()
    if current:
        return current
    shm = Path("/dev/shm")
    folder = shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())
    path = str(folder / f"specdeploy-k0-pass-{os.getpid()}.f64")
    env[LEDGER_ENV] = path
    return path


class PassLedger:
    """Seconds and passes per batch-size bucket in a shared file (module docstring).

    One process writes (the worker), others read (the engine core's
    collector); each float64 is written whole, so a reader sees at worst a
    pass's seconds before its count.
    """

    def __init__(self, path: str, *, create: bool) -> None:
        self.path = path
        self._view: Any = None
        """The file as float64s (``memoryview.cast("d")``), once opened."""
        self._map: mmap.mmap | None = None
        if create:
            self._open(create=True)

    def _open(self, *, create: bool) -> Any:
        if self._view is not None:
            return self._view
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        try:
            fd = os.open(self.path, flags, 0o600)
        except FileNotFoundError:
            return None  # no pass timed yet
        try:
            if os.fstat(fd).st_size < _SIZE:
                if not create:
                    return None  # the writer has not sized it yet
                os.ftruncate(fd, _SIZE)
            self._map = mmap.mmap(fd, _SIZE)
        finally:
            os.close(fd)
        self._view = memoryview(self._map).cast("d")
        return self._view

    def add(self, batch_size: int, seconds: float) -> None:
        """One pass at a step of ``batch_size`` requests. Hot path: two float adds."""
        view = self._view
        bucket = bucket_of(batch_size if batch_size > 0 else 1)
        if view is None or bucket >= BUCKETS:
            return
        view[2 * bucket] += seconds
        view[2 * bucket + 1] += 1.0

    def totals(self) -> dict[int, tuple[float, float]]:
        """(seconds, passes) per bucket that has passes; empty when nothing was timed."""
        view = self._open(create=False)
        if view is None:
            return {}
        out: dict[int, tuple[float, float]] = {}
        for bucket in range(BUCKETS):
            passes = view[2 * bucket + 1]
            if passes > 0:
                out[bucket] = (view[2 * bucket], passes)
        return out


def decode_only(scheduler_output: Any) -> int:
    """The step's number of requests when each was scheduled one token plus its drafts
    (no prefill rode along), else 0."""
    scheduled = scheduler_output.num_scheduled_tokens
    drafts = scheduler_output.scheduled_spec_decode_tokens
    requests = len(scheduled)
    expected = requests + sum(len(d) for d in drafts.values())
    return requests if scheduler_output.total_num_scheduled_tokens == expected else 0


def _first_rank() -> bool:
    try:
        from vllm.distributed import get_tensor_model_parallel_rank

        return bool(get_tensor_model_parallel_rank() == 0)
    except Exception:  # no group yet (a test, one process): the only writer
        return True


_ledger: PassLedger | None = None


def worker_ledger() -> PassLedger | None:
    """This worker's ledger, opened on first use; None off the path or off the first rank."""
    global _ledger
    if _ledger is None:
        path = os.environ.get(LEDGER_ENV, "").strip()
        if not path or not _first_rank():
            return None
        _ledger = PassLedger(path, create=True)
    return _ledger


class CudaClock:
    """The pass's GPU time from CUDA events, read once the GPU has run it: never a sync.

    Each pass records a start and an end event on the current stream; a later
    pass collects every earlier one whose end event has completed (by then
    the step that queued it has long synchronised). At most ``limit`` wait;
    older ones are dropped, untimed, rather than held.
    """

    def __init__(self, event: Callable[[], Any] | None = None, limit: int = 64) -> None:
        self._event = event
        self.pending: deque[tuple[int, Any, Any]] = deque(maxlen=limit)

    def new_event(self) -> Any:
        if self._event is None:
            import torch

            return torch.cuda.Event(enable_timing=True)
        return self._event()

    def run(self, requests: int, call: Callable[[], Any], book: PassLedger) -> Any:
        start, end = self.new_event(), self.new_event()
        start.record()
        out = call()
        end.record()
        self.collect(book)
        self.pending.append((requests, start, end))
        return out

    def collect(self, book: PassLedger) -> None:
        while self.pending and self.pending[0][2].query():
            requests, start, end = self.pending.popleft()
            book.add(requests, start.elapsed_time(end) / 1000.0)  # ms -> s


_cuda_clock = CudaClock()


def timed_pass(
    runner: Any,
    call: Callable[[], Any],
    scheduler_output: Any,
    ledger: Callable[[], PassLedger | None] | None = None,
    cuda: CudaClock | None = None,
) -> Any:
    """Run a stateful drafter's K=0 pass (``call``), timing it on a decode-only step into
    ``ledger()`` (the worker's by default): the process clock on a CPU device, CUDA
    events on a GPU (``CudaClock``); any other device is not timed."""
    device = getattr(getattr(runner, "device", None), "type", "cpu")
    requests = decode_only(scheduler_output) if device in ("cpu", "cuda") else 0
    if not requests:
        return call()
    book = (ledger or worker_ledger)()
    if book is None:
        return call()
    if device == "cuda":
        return (cuda or _cuda_clock).run(requests, call, book)
    start = time.perf_counter()
    out = call()
    book.add(requests, time.perf_counter() - start)
    return out


class K0PassSeries(Collector):
    """The ledger as the add-on's counters, read when scraped (nothing before a pass)."""

    def __init__(self, pool: str, ledger: PassLedger) -> None:
        self.pool = pool
        self.ledger = ledger

    def collect(self) -> Iterator[Any]:
        totals = self.ledger.totals()
        if not totals:
            return
        labels = [SeriesLabel.POOL.value, SeriesLabel.BATCH_BUCKET.value]
        seconds = CounterMetricFamily(
            Series.K0_PASS_SECONDS.value,
            "Seconds of the drafter's pass on decode-only K=0 steps (stateful drafters)",
            labels=labels,
        )
        passes = CounterMetricFamily(
            Series.K0_PASSES.value, "The drafter's timed K=0 passes", labels=labels
        )
        for bucket, (total, count) in sorted(totals.items()):
            label = bucket_label(1 << bucket)
            seconds.add_metric([self.pool, label], total)
            passes.add_metric([self.pool, label], count)
        yield seconds
        yield passes


def series_for(pool: str, environ: Mapping[str, str] | None = None) -> K0PassSeries | None:
    """The collector for this engine's ledger; None where the plugin set no path."""
    path = (os.environ if environ is None else environ).get(LEDGER_ENV, "").strip()
    return K0PassSeries(pool, PassLedger(path, create=False)) if path else None


__all__ = [
    "LEDGER_ENV",
    "CudaClock",
    "K0PassSeries",
    "PassLedger",
    "claim_path",
    "decode_only",
    "series_for",
    "timed_pass",
    "worker_ledger",
]
