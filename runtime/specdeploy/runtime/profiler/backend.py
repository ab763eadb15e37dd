"""The contract between the profiler's search and whatever runs the steps.

A backend runs fixed-size batches: ``measure(batch_size, k, steps)`` keeps
exactly ``batch_size`` sequences decoding at draft length ``k`` (K=0: no
drafts verified) for ``steps`` steps after its own warm-up, and returns the
per-step times and the per-position draft counts. The search decides which
cells to measure and how often to repeat them; the backend only measures.

A backend may also measure plain decoding (no speculation configured) at a
batch size, ``measure_baseline(batch_size, steps)`` (``MeasuresBaseline``):
the floor a speculative K must beat, which K=0 with speculation configured
is not. It is optional: the search asks a backend that has it for one
baseline per batch size after the grid, and a backend without it yields a
profile without a baseline.

Two backends: ``sim`` (``sim_backend``: a simulator preset, modelled) and
``vllm`` (``vllm_backend``: a real engine, measured). The vLLM backend is
imported only when asked for (``create_vllm_backend``): importing vLLM takes
seconds and gigabytes, and an image without it must still run the ``sim``
backend. Its contract is one function, ``create_backend(options:
EngineOptions) -> ProfilerBackend``, raising ``DeterministicFailure``
(``exit_codes``) for a missing model, OOM at the smallest batch and the
like. An image where that module (or vLLM) cannot be imported fails with
BACKEND_UNAVAILABLE, deterministically: a retry on the same image fails the
same way.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from specdeploy.runtime.profile import Fingerprint, Source
from specdeploy.runtime.profiler.datasets import Conversation
from specdeploy.runtime.profiler.exit_codes import (
    backend_unavailable,
    invalid_arguments,
    model_not_found,
)


@dataclass(frozen=True)
class CellSample:
    """One ``measure`` call: per-step seconds and the draft counts of its steps.

    ``drafted[i]`` counts sequence-steps that reached draft position i+1
    (positions 1..i all accepted; a position the drafter did not propose
    counts as reached and rejected, ``goodput.reached_counts``), and
    ``accepted[i]`` how many of those accepted it. The optional fields carry
    the rest of ``reached_counts`` and what the cost model needs: totals over
    the counted steps of the sequence-steps that decoded, the tokens they
    verified (1 + proposal length each) and the context they read. A backend
    that predates them leaves them None (every position then counts as
    proposed, and K + 1 tokens as verified).
    """

    batch_size: int
    k: int
    step_seconds: Sequence[float]
    drafted: Sequence[int] = field(default_factory=tuple)
    accepted: Sequence[int] = field(default_factory=tuple)
    proposed: Sequence[int] | None = None
    offered: Sequence[int] | None = None
    scheduled: Sequence[int] | None = None
    sequence_steps: int | None = None
    verified_tokens: int | None = None
    context_tokens: int | None = None
    prompts: Sequence[str] = field(default_factory=tuple)
    """Names of the prompts the repeat decoded (empty: the backend does not say)."""


class ProfilerBackend(Protocol):
    """Runs fixed-size batches on one engine (simulated or real)."""

    name: str
    source: Source
    """``modelled`` for the simulator, ``measured`` for a real engine."""

    def fingerprint(self) -> Fingerprint:
        """What the resulting profile is keyed by (model, draft, hardware, engine, maxK)."""
        ...

    def measure(self, batch_size: int, k: int, steps: int) -> CellSample:
        """Run ``steps`` decode steps of ``batch_size`` sequences at draft length ``k``.

        Raises DeterministicFailure for failures that retrying cannot fix.
        """
        ...

    def close(self) -> None:
        """Release the engine (processes, memory)."""
        ...


@runtime_checkable
class MeasuresBaseline(Protocol):
    """A backend that can also run plain decoding, with no speculation configured."""

    def measure_baseline(self, batch_size: int, steps: int) -> CellSample:
        """``steps`` decode steps of ``batch_size`` sequences on an engine without speculation.

        The sample has ``k == 0`` and no draft counts; it may carry
        ``sequence_steps``, ``verified_tokens`` and ``context_tokens``. The
        backend may release its speculative engine to run it: the search
        asks for baselines only after every speculative cell.
        """
        ...


@runtime_checkable
class MeasuresContext(Protocol):
    """A backend that can start a cell's sequences at a chosen context length.

    The step-cost model prices context (KV reads) additively
    (``cost.StepCostModel``: gamma per context token); it needs a few cells
    at other contexts than the serving mix's to fit that slope.
    """

    def default_prompt_tokens(self) -> int:
        """The prompt length an ordinary cell's sequences start at (its context)."""
        ...

    def measure_at_context(
        self, batch_size: int, k: int, steps: int, prompt_tokens: int
    ) -> CellSample:
        """``measure`` with every sequence starting at a ``prompt_tokens``-token context."""
        ...


@runtime_checkable
class RecordsRuns(Protocol):
    """A backend that keeps a log of its own runs (the ``vllm`` backend: drafts per
    sequence step, skipped steps, wall time), written into the ``--raw`` file."""

    def raw(self) -> list[dict[str, Any]]: ...


VLLM_MODULE = "specdeploy.runtime.profiler.vllm_backend"
METHODS = ("eagle", "eagle3", "draft_model", "ngram", "mtp", "suffix")
METHODS_WITH_DRAFT = frozenset({"eagle", "eagle3", "draft_model"})


@dataclass(frozen=True)
class EngineOptions:
    """What the ``vllm`` backend needs to start an engine and fingerprint it."""

    model: str
    method: str
    max_k: int
    draft_model: str | None = None
    model_revision: str = "main"
    draft_revision: str | None = None
    dtype: str = "auto"
    tensor_parallel_size: int = 1
    max_batch_size: int = 256
    """The largest batch size the search may ask for (vLLM's ``max_num_seqs``)."""
    max_model_len: int | None = None
    gpu_type: str | None = None
    """The fingerprint's GPU type (the pool's ``nvidia.com/gpu.product``); the
    backend detects it when None."""
    seed: int = 0
    dataset: str = "mt-bench"
    conversations: tuple[Conversation, ...] = field(default=(), repr=False)
    engine_args: tuple[str, ...] = ()
    """Extra vLLM engine arguments, ``key=value``."""
    min_prompts: int = 32
    """Distinct prompts each repeat of a cell decodes at least (the vllm backend)."""
    cache_dir: Path | None = None


def check_engine_options(options: EngineOptions) -> None:
    """Refuse, deterministically, what no engine start could fix."""
    if options.method not in METHODS:
        raise invalid_arguments(f"--method: {options.method!r} is not one of {', '.join(METHODS)}")
    if options.method in METHODS_WITH_DRAFT and not options.draft_model:
        raise invalid_arguments(f"--method {options.method} needs --draft-model")
    if options.max_k < 1:
        raise invalid_arguments(f"--max-k must be >= 1 for vLLM, got {options.max_k}")
    for flag, name in (("--model", options.model), ("--draft-model", options.draft_model)):
        if name and _looks_like_path(name) and not Path(name).expanduser().exists():
            raise model_not_found(f"{flag}: {name} does not exist")


def _looks_like_path(name: str) -> bool:
    """A local path rather than a hub id ("org/name"): starts with /, ., or ~."""
    return name.startswith(("/", "./", "../", "~"))


def create_vllm_backend(options: EngineOptions) -> ProfilerBackend:
    """The real engine, imported lazily (module docstring)."""
    check_engine_options(options)
    try:
        module = importlib.import_module(VLLM_MODULE)
    except ImportError as err:
        raise backend_unavailable(f"the vllm backend cannot be loaded: {err}") from err
    factory = getattr(module, "create_backend", None)
    if factory is None:
        raise backend_unavailable(f"{VLLM_MODULE} has no create_backend(options)")
    backend: ProfilerBackend = factory(options)
    return backend
