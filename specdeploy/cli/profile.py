"""``specdeploy profile``: measure step time per (batch size, K) and write a SpeculationProfile.

The profiling Job's entrypoint, and a local command::

    specdeploy profile --backend sim --preset seed-dense --out p.yaml
    specdeploy profile --backend vllm --model Qwen/Qwen3-8B --method eagle3 \\
        --draft-model AngelSlim/Qwen3-8B_eagle3 --max-k 5 --dataset mt-bench

Re-derive a profile from its raw file under the current definitions,
without re-measuring (``runtime/profiler/from_raw.py``)::

    specdeploy profile --from-raw p.raw.json --out p.yaml [--like old.yaml]

In a pod without ``--out`` the profile is created or replaced through the
Kubernetes API (namespace and name from ``--namespace``/``--name``, or
``$SPECDEPLOY_PROFILE_NAMESPACE``/``$SPECDEPLOY_PROFILE_NAME``, or the
service account's namespace). Exit codes (runtime/profiler/exit_codes.py):
0 written, 1 transient, 2 invalid arguments, 3 model not found, 4 out of
memory at the smallest batch, 5 dataset unavailable, 6 backend unavailable,
7 output rejected by the API. On failure the reason is also written, on one
line, to ``--termination-log`` (skipped when its directory does not exist).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from specdeploy.runtime.profile import Fingerprint
from specdeploy.runtime.profiler.backend import METHODS, EngineOptions
from specdeploy.runtime.profiler.exit_codes import ExitCode
from specdeploy.runtime.profiler.run import OutputOptions, ProfileOptions, execute
from specdeploy.runtime.profiler.sampling import Sampling
from specdeploy.runtime.profiler.search import SearchMode
from specdeploy.runtime.profiler.termination import DEFAULT_PATH, write_termination_message

DEFAULT_BATCH_SIZES = "1,2,4,8,16,32,64,128,256"
MIN_REPEATS = {SearchMode.EXHAUSTIVE: 5, SearchMode.SMART: 1}
"""The exhaustive grid spends a fixed minimum on every cell; the smart search
stops a cell as soon as its confidence interval is narrow."""


class _ProfileParser(argparse.ArgumentParser):
    """argparse, but a usage error also lands in the termination-message file.

    The operator reads that file to say why a Job failed; argparse's own
    errors would otherwise leave it empty. The path comes from the raw
    arguments, since they did not parse.
    """

    raw_args: Sequence[str] = ()

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self.raw_args = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        write_termination_message(f"invalid arguments: {message}", _termination_path(self.raw_args))
        self.print_usage(sys.stderr)
        self.exit(int(ExitCode.INVALID_ARGUMENTS), f"{self.prog}: error: {message}\n")


def _termination_path(raw: Sequence[str]) -> Path:
    for i, arg in enumerate(raw):
        if arg.startswith("--termination-log="):
            return Path(arg.split("=", 1)[1])
        if arg == "--termination-log" and i + 1 < len(raw):
            return Path(raw[i + 1])
    return DEFAULT_PATH


def _batch_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not sizes or any(b < 1 for b in sizes) or len(set(sizes)) != len(sizes):
        raise argparse.ArgumentTypeError(f"distinct integers >= 1 needed, got {text!r}")
    return sizes


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def register(subparsers: Any) -> None:
    """Add ``profile`` to the top-level parser."""
    p = subparsers.add_parser(
        "profile",
        help="measure ITL per (batch size, K) and write a SpeculationProfile",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    p.__class__ = _ProfileParser
    engine = p.add_argument_group("engine")
    engine.add_argument("--backend", choices=("sim", "vllm"), default="sim")
    engine.add_argument(
        "--preset", help="sim: simulator preset (specdeploy simulate --list-presets)"
    )
    engine.add_argument(
        "--jitter", type=float, help="sim: step-time noise (log s.d.; default 0.03)"
    )
    engine.add_argument("--model", help="vllm: target model (hub id or path)")
    engine.add_argument("--model-revision", default="main")
    engine.add_argument("--method", choices=METHODS, default="ngram", help="vllm: drafting method")
    engine.add_argument("--draft-model", help="vllm: draft model (eagle, eagle3, draft_model)")
    engine.add_argument("--draft-revision")
    engine.add_argument("--dtype", default="auto")
    engine.add_argument("--tensor-parallel-size", type=_positive, default=1)
    engine.add_argument("--max-model-len", type=_positive)
    engine.add_argument(
        "--gpu-type",
        help="nvidia.com/gpu.product; vllm: for the fingerprint (default: detected); "
        "sim: the GPU to model instead of the preset's",
    )
    engine.add_argument("--engine-arg", action="append", default=[], metavar="KEY=VALUE")
    engine.add_argument("--cache-dir", type=Path, help="vllm: where converted models are cached")
    engine.add_argument("--max-k", type=_positive, help="largest K (vllm: required, sim: preset's)")
    engine.add_argument(
        "--emulate",
        action="store_true",
        help="sim: key the profile by the engine flags (--model, --method, --gpu-type, ...) "
        "as vllm would, modelled by --preset (the local cluster's emulated GPU pods)",
    )

    grid = p.add_argument_group("grid and search")
    grid.add_argument("--batch-sizes", type=_batch_sizes, default=_batch_sizes(DEFAULT_BATCH_SIZES))
    grid.add_argument("--search", choices=[m.value for m in SearchMode], default="smart")
    grid.add_argument("--steps", type=_positive, default=32, help="decode steps per repeat")
    grid.add_argument("--min-repeats", type=_positive, help="default: exhaustive 5, smart 1")
    grid.add_argument("--max-repeats", type=_positive, default=16)
    grid.add_argument(
        "--max-steps-factor",
        type=_positive,
        default=8,
        help="a repeat asks for at most this many times --steps (the budget of one repeat)",
    )
    grid.add_argument("--ci", type=float, default=0.01, help="stop at this relative CI half-width")
    grid.add_argument("--dataset", help="mt-bench | sharegpt | FILE.jsonl (default mt-bench)")
    grid.add_argument("--prompts", type=_positive, help="conversations to load")
    grid.add_argument(
        "--min-prompts",
        type=_positive,
        default=32,
        help="vllm: distinct prompts each repeat of a cell decodes at least (default 32)",
    )
    grid.add_argument("--seed", type=int, default=0)
    grid.add_argument(
        "--baseline",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also measure plain decoding (no speculation) per batch size where the backend "
        "can (vllm: a second engine, started after the grid)",
    )
    grid.add_argument(
        "--context-axis",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also measure the best K of the smallest, middle and largest batch size at 1/4 "
        "and 4x the ordinary prompt length, so the cost model prices context (sim; the vllm "
        "backend cannot set a context yet)",
    )

    again = p.add_argument_group("re-derive (no engine)")
    again.add_argument(
        "--from-raw",
        type=Path,
        metavar="RAW",
        help="rebuild the profile from a --raw file under the current definitions (needs --out)",
    )
    again.add_argument(
        "--like",
        type=Path,
        metavar="PROFILE",
        help="the profile RAW was made with (fingerprint, name, dataset) when RAW records "
        "none; default: --out when it exists",
    )

    out = p.add_argument_group("output")
    out.add_argument("--out", type=Path, help="write the profile to FILE (- for stdout)")
    out.add_argument("--raw", type=Path, help="also write raw samples and decisions (JSON)")
    out.add_argument(
        "--kubernetes",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="write through the API (default: when in a pod and no --out)",
    )
    out.add_argument("--name", help="profile name (default p-<fingerprint digest>)")
    out.add_argument("--namespace", help="profile namespace (in a pod: the service account's)")
    out.add_argument("--termination-log", type=Path, default=DEFAULT_PATH)
    out.add_argument("--progress-interval", type=float, default=10.0, metavar="SECONDS")
    p.set_defaults(handler=run)


def options_from(args: argparse.Namespace) -> ProfileOptions:
    """The run's options from parsed flags (value checks happen in ``execute``)."""
    search = SearchMode(args.search)
    min_repeats = args.min_repeats or MIN_REPEATS[search]
    sampling = Sampling(
        steps=args.steps,
        min_repeats=min_repeats,
        max_repeats=max(args.max_repeats, min_repeats),
        rel_ci=args.ci,
        max_steps_factor=args.max_steps_factor,
    )
    engine = None
    if args.backend == "vllm" and args.model:
        engine = EngineOptions(
            model=args.model,
            method=args.method,
            max_k=args.max_k or 0,
            draft_model=args.draft_model,
            model_revision=args.model_revision,
            draft_revision=args.draft_revision,
            dtype=args.dtype,
            tensor_parallel_size=args.tensor_parallel_size,
            max_model_len=args.max_model_len,
            gpu_type=args.gpu_type,
            seed=args.seed,
            engine_args=tuple(args.engine_arg),
            min_prompts=args.min_prompts,
            cache_dir=args.cache_dir,
        )
    return ProfileOptions(
        emulate=emulated_fingerprint(args) if args.emulate else None,
        backend=args.backend,
        batch_sizes=args.batch_sizes,
        search=search,
        sampling=sampling,
        max_k=args.max_k,
        dataset=args.dataset,
        prompts=args.prompts,
        preset=args.preset,
        seed=args.seed,
        jitter=args.jitter,
        gpu_type=args.gpu_type,
        engine=engine,
        baseline=args.baseline,
        context_axis=args.context_axis,
        output=OutputOptions(
            out=args.out,
            kubernetes=args.kubernetes,
            name=args.name,
            namespace=args.namespace,
            raw=args.raw,
        ),
        termination_log=args.termination_log,
        progress_interval_s=args.progress_interval,
    )


def emulated_fingerprint(args: argparse.Namespace) -> Fingerprint:
    """``--emulate``: the fingerprint the vllm backend would record for these engine flags.

    The engine is ``vllm`` at the version the simulator models: the pod being
    emulated would run vLLM, and the operator looks its profile up by that.
    """
    from specdeploy.runtime.sim.presets import SIM_ENGINE_VERSION

    if not args.model or not args.max_k or not args.gpu_type:
        raise ValueError("--emulate needs --model, --max-k and --gpu-type")
    return Fingerprint(
        model=args.model,
        model_revision=args.model_revision,
        method=args.method,
        draft_model=args.draft_model,
        draft_revision=args.draft_revision,
        gpu_type=args.gpu_type,
        gpus_per_replica=args.tensor_parallel_size,
        dtype=args.dtype,
        engine="vllm",
        engine_version=SIM_ENGINE_VERSION,
        max_k=args.max_k,
    )


def run(args: argparse.Namespace) -> int:
    if args.from_raw is not None:
        return rederive_raw(args)
    try:
        options = options_from(args)
    except ValueError as err:  # Sampling's own checks (e.g. --ci outside (0, 1))
        reason = f"invalid arguments: {err}"
        print(f"specdeploy profile: error: {reason}", file=sys.stderr)
        write_termination_message(reason, args.termination_log)
        return int(ExitCode.INVALID_ARGUMENTS)
    if args.from_raw is None:
        for line in options.sampling.precision_warnings():
            print(f"specdeploy profile: warning: {line}", file=sys.stderr)
    return execute(options)


def rederive_raw(args: argparse.Namespace) -> int:
    """``--from-raw``: the profile of a raw file, written to ``--out`` (exit 0, or 2)."""
    from specdeploy.runtime.profile import ProfileError, load_profile
    from specdeploy.runtime.profiler.from_raw import RawFileError, read_raw, rederive
    from specdeploy.runtime.profiler.writer import FileWriter
    from specdeploy.runtime.ranges import format_schedule

    try:
        if args.out is None:
            raise RawFileError("--from-raw needs --out FILE (- for stdout)")
        like_path = args.like
        if like_path is None and str(args.out) != "-" and args.out.is_file():
            like_path = args.out
        like = load_profile(like_path) if like_path is not None else None
        doc = rederive(read_raw(args.from_raw), like=like, source_name=str(args.from_raw))
    except (RawFileError, ProfileError, ValueError) as err:
        reason = f"invalid arguments: {err}"
        print(f"specdeploy profile: error: {reason}", file=sys.stderr)
        write_termination_message(reason, args.termination_log)
        return int(ExitCode.INVALID_ARGUMENTS)
    place = FileWriter(args.out).write(doc)
    schedule = format_schedule(doc.spec.schedule or ())
    print(f"specdeploy profile: {args.from_raw} re-derived to {place}: {schedule}", file=sys.stderr)
    return int(ExitCode.OK)
