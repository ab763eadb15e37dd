"""One profiling run, end to end: options in, a written profile and an exit code out.

``execute`` is what ``specdeploy profile`` calls: it plans the outputs
(failing fast on a missing namespace or RBAC before any engine time),
builds the backend, runs the search, builds and validates the profile,
writes it, and maps every failure to an exit code (``exit_codes``) with a
one-line reason in the termination-message file.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from pydantic.alias_generators import to_camel

from specdeploy.runtime.kube.client import Client
from specdeploy.runtime.kube.config import in_cluster
from specdeploy.runtime.profile import Fingerprint, SpeculationProfile
from specdeploy.runtime.profiler.backend import (
    EngineOptions,
    ProfilerBackend,
    RecordsRuns,
    create_vllm_backend,
)
from specdeploy.runtime.profiler.datasets import dataset_label, load_conversations
from specdeploy.runtime.profiler.document import SEARCH_ANNOTATION, build_profile
from specdeploy.runtime.profiler.exit_codes import DeterministicFailure, ExitCode, invalid_arguments
from specdeploy.runtime.profiler.grid import Grid
from specdeploy.runtime.profiler.job_contract import ENV_FINGERPRINT, ENV_NAME, ENV_NAMESPACE
from specdeploy.runtime.profiler.progress import Progress, duration
from specdeploy.runtime.profiler.sampling import CellStats, Sampling
from specdeploy.runtime.profiler.search import (
    SearchMode,
    finish,
    measure_baselines,
    run_search,
)
from specdeploy.runtime.profiler.termination import write_termination_message
from specdeploy.runtime.profiler.writer import ApiWriter, FileWriter, ProfileWriter, recoverable
from specdeploy.runtime.ranges import format_schedule

if TYPE_CHECKING:
    from specdeploy.runtime.sim.presets import Preset

PRESET_ANNOTATION = "specdeploy.io/sim-preset"


@dataclass(frozen=True)
class OutputOptions:
    """Where the profile goes: ``out`` (a file, ``-`` for stdout) and/or the API."""

    out: Path | None = None
    kubernetes: bool | None = None
    """True: through the API; False: never; None: when in a pod and no ``out``."""
    name: str | None = None
    namespace: str | None = None
    raw: Path | None = None
    """Also write every cell's raw samples and the search's decisions (JSON)."""


@dataclass(frozen=True)
class ProfileOptions:
    """Everything ``specdeploy profile`` was asked to do."""

    backend: str = "sim"
    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    search: SearchMode = SearchMode.SMART
    sampling: Sampling = field(default_factory=Sampling)
    max_k: int | None = None
    dataset: str | None = None
    prompts: int | None = None
    """How many conversations to load (default: all of MT-Bench, 512 otherwise)."""
    preset: str | None = None
    seed: int = 0
    jitter: float | None = None
    gpu_type: str | None = None
    """sim: model this GPU (its ``nvidia.com/gpu.product``) instead of the preset's."""
    engine: EngineOptions | None = None
    emulate: Fingerprint | None = None
    """sim: key the profile by this fingerprint (the engine flags' model, method, GPU,
    ...) instead of the preset's: how the local cluster's emulated GPU pods profile the
    pod's own model. The figures stay the preset's, and the profile says ``modelled``."""
    baseline: bool = True
    """Also measure plain decoding per batch size, where the backend can (``MeasuresBaseline``;
    the vllm backend starts a second engine for it)."""
    context_axis: bool = True
    """Also measure a few cells at other contexts, where the backend can (``MeasuresContext``),
    so the step-cost model can price context (``search.measure_contexts``); the smart search
    then verifies its picks again under the re-fitted model (``search.finish``)."""
    output: OutputOptions = field(default_factory=OutputOptions)
    termination_log: Path | None = None
    progress_interval_s: float = 10.0


BackendFactory = Callable[[ProfileOptions], ProfilerBackend]


# --- planning ------------------------------------------------------------


def check_options(options: ProfileOptions) -> None:
    """Argument problems no backend start could fix."""
    sizes = options.batch_sizes
    if not sizes or any(b < 1 for b in sizes) or len(set(sizes)) != len(sizes):
        raise invalid_arguments(f"--batch-sizes: distinct integers >= 1 needed, got {sizes}")
    if options.max_k is not None and not 1 <= options.max_k <= 16:
        raise invalid_arguments(f"--max-k must lie in 1..16, got {options.max_k}")
    if options.backend == "sim" and not options.preset:
        raise invalid_arguments("--backend sim needs --preset (specdeploy simulate --list-presets)")
    if options.emulate is not None and options.backend != "sim":
        raise invalid_arguments("--emulate models an engine with the simulator: --backend sim")
    if options.backend == "vllm" and options.engine is None:
        raise invalid_arguments("--backend vllm needs --model")
    if options.backend not in ("sim", "vllm"):
        raise invalid_arguments(f"--backend: {options.backend!r} is not sim or vllm")


def plan_writers(output: OutputOptions, env: Mapping[str, str]) -> list[ProfileWriter]:
    """The writers the options ask for; invalid combinations fail before any work."""
    writers: list[ProfileWriter] = []
    if output.out is not None:
        writers.append(FileWriter(output.out))
    client = in_cluster(env)
    use_api = output.kubernetes if output.kubernetes is not None else output.out is None
    if use_api and client is None:
        if output.kubernetes:
            raise invalid_arguments("--kubernetes: not in a pod (no KUBERNETES_SERVICE_HOST)")
        raise invalid_arguments("no output: give --out FILE, or run in a pod")
    if use_api and client is not None:
        writers.append(_api_writer(output, env, client))
    return writers


def _api_writer(output: OutputOptions, env: Mapping[str, str], client: Client) -> ApiWriter:
    namespace = output.namespace or env.get(ENV_NAMESPACE) or client.namespace
    if not namespace:
        raise invalid_arguments(
            f"no namespace for the profile: --namespace, ${ENV_NAMESPACE}, "
            "or the service account's namespace file"
        )
    return ApiWriter(client, namespace, name=output.name)


# --- backends --------------------------------------------------------------


def _on_gpu(preset: Preset, gpu_type: str) -> Preset:
    """The preset's model and draft on another GPU, so a pool's modelled profile
    describes that pool's hardware (and its fingerprint says so)."""
    from specdeploy.runtime.sim.hardware import get_gpu

    try:
        gpu = get_gpu(gpu_type)
    except KeyError as err:
        raise invalid_arguments(
            f"--gpu-type: the simulator has no model of it: {err.args[0]}"
        ) from None
    return dataclasses.replace(preset, gpu=gpu)


def make_backend(options: ProfileOptions) -> ProfilerBackend:
    """The backend the options name, started."""
    if options.backend == "sim":
        from specdeploy.runtime.profiler.sim_backend import DEFAULT_JITTER, SimBackend
        from specdeploy.runtime.sim.presets import get_preset

        try:
            preset = get_preset(options.preset or "")
        except KeyError as err:
            raise invalid_arguments(f"--preset: {err.args[0]}") from None
        if options.gpu_type:
            preset = _on_gpu(preset, options.gpu_type)
        jitter = DEFAULT_JITTER if options.jitter is None else options.jitter
        return SimBackend(preset, seed=options.seed, jitter=jitter, fingerprint=options.emulate)
    assert options.engine is not None
    dataset = options.dataset or "mt-bench"
    conversations = tuple(load_conversations(dataset, limit=options.prompts or _limit(dataset)))
    engine = dataclasses.replace(
        options.engine,
        dataset=dataset_label(dataset),
        conversations=conversations,
        max_batch_size=max(options.batch_sizes),
    )
    return create_vllm_backend(engine)


def _limit(dataset: str) -> int | None:
    return None if dataset == "mt-bench" else 512


# --- the run ---------------------------------------------------------------


@dataclass
class Outcome:
    """What a run produced (the profile, and the grid for the raw output)."""

    profile: SpeculationProfile
    grid: Grid
    sizes: list[int]
    wall_seconds: float
    engine_runs: list[dict[str, Any]] = field(default_factory=list)
    """The backend's own log of its runs, where it keeps one (``backend.RecordsRuns``)."""


def profile(
    options: ProfileOptions, backend: ProfilerBackend, observer: Progress | None = None
) -> Outcome:
    """Search, measure and build the validated profile (nothing written)."""
    started = time.monotonic()
    fingerprint = backend.fingerprint()
    max_k = fingerprint.max_k if options.max_k is None else options.max_k
    if max_k > fingerprint.max_k:
        raise invalid_arguments(f"--max-k {max_k} exceeds the engine's maxK {fingerprint.max_k}")
    fingerprint = fingerprint.model_copy(update={"max_k": max_k})
    grid = Grid(
        backend,
        options.sampling,
        max_k=max_k,
        smallest_batch_size=min(options.batch_sizes),
        observer=observer,
    )
    sizes = run_search(grid, options.search, options.batch_sizes)
    finish(grid, options.search, sizes, context_axis=options.context_axis)
    if options.baseline:
        measure_baselines(grid, sizes)
    annotations = {SEARCH_ANNOTATION: options.search.value}
    if options.backend == "sim" and options.preset:
        annotations[PRESET_ANNOTATION] = options.preset
    doc = build_profile(
        grid,
        fingerprint=fingerprint,
        source=backend.source,
        dataset=_recorded_dataset(options, backend),
        name=options.output.name,
        annotations=annotations,
    )
    runs = backend.raw() if isinstance(backend, RecordsRuns) else []
    return Outcome(doc, grid, sizes, time.monotonic() - started, runs)


def _recorded_dataset(options: ProfileOptions, backend: ProfilerBackend) -> str:
    """The sim's acceptance is the preset's model of its dataset: record that one."""
    preset = getattr(backend, "preset", None)
    if options.backend == "sim" and preset is not None:
        return str(preset.dataset)
    return dataset_label(options.dataset or "mt-bench")


RAW_COUNTS = "reached"
"""The raw file's count definition: ``reached`` (a missing draft counted as reached and
rejected, ``goodput.reached_counts``). Files without it predate it (``rederive``)."""


def raw_document(options: ProfileOptions, outcome: Outcome) -> dict[str, Any]:
    """Every cell's samples and the search's decisions, for review and re-derivation."""
    grid = outcome.grid
    spec = outcome.profile.spec
    return {
        "profile": outcome.profile.metadata.name,
        "source": spec.source.value,
        "counts": RAW_COUNTS,
        "fingerprint": spec.fingerprint.model_dump(mode="json", by_alias=True),
        "dataset": spec.dataset,
        "backend": options.backend,
        "search": options.search.value,
        "sampling": dataclasses.asdict(options.sampling),
        "batchSizes": outcome.sizes,
        "droppedFrom": grid.dropped_from,
        "runs": grid.calls,
        "measuredSeconds": grid.measured_seconds(),
        "wallSeconds": outcome.wall_seconds,
        "cells": [raw_cell(s) for _, s in sorted(grid.cells.items())],
        "baseline": [raw_cell(s) for _, s in sorted(grid.baselines.items())],
        "contexts": [
            {**raw_cell(s), "promptTokens": prompt}
            for (_, _, prompt), s in sorted(grid.contexts.items())
        ],
        "log": grid.log,
        "engineRuns": [{to_camel(k): v for k, v in run.items()} for run in outcome.engine_runs],
    }


def raw_cell(s: CellStats) -> dict[str, Any]:
    """One cell in the raw file: its samples, counts and totals, and the figures they give."""
    return {
        "batchSize": s.batch_size,
        "k": s.k,
        "itlMs": s.itl_ms,
        "halfWidthMs": s.half_width() * 1e3,
        "repeats": s.repeats,
        "repeatMeans": s.repeat_means,
        "repeatSteps": s.repeat_steps,
        "repeatFirstPosition": [list(r) for r in s.repeat_first],
        "stepSeconds": s.step_seconds,
        "reached": s.drafted,
        "proposed": s.proposed,
        "accepted": s.accepted,
        "offered": s.offered,
        "scheduled": s.scheduled,
        "sequenceSteps": s.sequence_steps,
        "verifiedTokens": s.verified_tokens,
        "contextTokens": s.context_tokens,
        "draftingRate": s.drafting_rate(),
        "prompts": sorted(s.prompts),
        "verifiedPerSequence": s.verified_per_sequence(),
        "acceptanceLength": s.acceptance_length(),
    }


def execute(
    options: ProfileOptions,
    *,
    env: Mapping[str, str] | None = None,
    stderr: TextIO | None = None,
    backend_factory: BackendFactory | None = None,
) -> int:
    """Run and write the profile; the exit code (``exit_codes``)."""
    env = os.environ if env is None else env
    err_stream = sys.stderr if stderr is None else stderr
    backend: ProfilerBackend | None = None
    if options.output.name is None and env.get(ENV_NAME):
        output = dataclasses.replace(options.output, name=env[ENV_NAME])
        options = dataclasses.replace(options, output=output)
    if options.backend == "sim" and env.get(ENV_FINGERPRINT):
        # the profile is named after this fingerprint: a modelled one records it as its own
        try:
            wanted = Fingerprint.model_validate_json(env[ENV_FINGERPRINT])
        except ValueError as err:
            reason = f"invalid arguments: ${ENV_FINGERPRINT}: {err}"
            return _fail(reason, ExitCode.INVALID_ARGUMENTS, options, err_stream)
        options = dataclasses.replace(options, emulate=wanted)
    try:
        check_options(options)
        writers = plan_writers(options.output, env)
        for writer in writers:
            if isinstance(writer, ApiWriter):
                writer.check_access()
        backend = (backend_factory or make_backend)(options)
        progress = Progress(err_stream, interval_s=options.progress_interval_s)
        outcome = profile(options, backend, progress)
        places = _write_all(writers, outcome.profile)
        if options.output.raw is not None:
            options.output.raw.write_text(json.dumps(raw_document(options, outcome), indent=1))
        progress.finish(_summary(outcome, places))
        return int(ExitCode.OK)
    except DeterministicFailure as failure:
        return _fail(failure.reason, failure.exit_code, options, err_stream)
    except Exception as error:  # anything else may be transient: let the Job retry
        return _fail(f"{type(error).__name__}: {error}", ExitCode.TRANSIENT, options, err_stream)
    finally:
        if backend is not None:
            backend.close()


def _write_all(writers: list[ProfileWriter], doc: SpeculationProfile) -> list[str]:
    """Write to each place; a write that fails leaves the profile in the log (review H5)."""
    try:
        return [writer.write(doc) for writer in writers]
    except Exception:
        sys.stdout.write(recoverable(doc))
        sys.stdout.flush()
        raise


def _summary(outcome: Outcome, places: list[str]) -> str:
    grid, spec = outcome.grid, outcome.profile.spec
    schedule = format_schedule(spec.schedule or ())
    dropped = f", batch sizes >= {grid.dropped_from} did not fit" if grid.dropped_from else ""
    return (
        f"{len(grid.cells)} cells ({grid.calls} runs, {grid.measured_seconds():.1f} s measured, "
        f"{duration(outcome.wall_seconds)} wall{dropped}); schedule {schedule}; "
        f"written to {', '.join(places)}"
    )


def _fail(reason: str, code: int, options: ProfileOptions, stream: TextIO) -> int:
    kind = "transient" if code == ExitCode.TRANSIENT else "deterministic"
    stream.write(f"specdeploy profile: error ({kind}, exit {code}): {reason}\n")
    write_termination_message(reason, options.termination_log)
    return int(code)
