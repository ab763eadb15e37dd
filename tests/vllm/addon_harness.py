"""Drives vLLM's real Scheduler through the add-on's factory, without a model: run in vLLM's venv.

Built the way vLLM's own scheduler tests build one: a ModelConfig on a folder
holding only ``config.json`` (no weights, no tokenizer), a KV cache config
with one full-attention group, the n-gram speculative config with a
per-batch-size table; then ``schedule()`` → a synthetic ``ModelRunnerOutput``
(known acceptance) → ``update_from_output()`` → ``update_draft_token_ids()``
(the drafter's proposals), step after step.

``python addon_harness.py OUT.json`` runs every scenario and writes
{scenario: result, or {"error": traceback}}; tests/vllm/test_addon_contract.py
asserts on it. Importing this file imports vLLM.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from vllm.config import (
    CacheConfig,
    DeviceConfig,
    ModelConfig,
    SchedulerConfig,
    SpeculativeConfig,
    VllmConfig,
)
from vllm.sampling_params import SamplingParams
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

from specdeploy.runtime.vllm_addon import scheduler_factory
from specdeploy.runtime.vllm_addon.scheduler import PolicyLookup
from tests.paths import FIXTURES

MAX_K = 3
MAX_SEQS = 16
VLLM_TABLE = [[1, 4, 3], [5, 16, 1]]
"""The table vLLM starts with (its K set, {1, 3}, is what the add-on may use by default)."""
FIXTURE = FIXTURES / "profile-small.yaml"
SCRATCH = Path(tempfile.mkdtemp(prefix="addon-harness-"))


def model_dir() -> str:
    path = SCRATCH / "model"
    path.mkdir(exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "num_hidden_layers": 2,
        "vocab_size": 1000,
        "max_position_embeddings": 2048,
        "torch_dtype": "float32",
    }
    (path / "config.json").write_text(json.dumps(config))
    return str(path)


def build(*, async_scheduling: bool = False, table: list[list[int]] | None = None) -> Any:
    """A scheduler from ``scheduler_factory`` (or plain vLLM when ``plain``)."""
    cfg = vllm_config(async_scheduling=async_scheduling, table=table)
    return scheduler_factory(**scheduler_kwargs(cfg))


def vllm_config(*, async_scheduling: bool = False, table: list[list[int]] | None = None) -> Any:
    model = ModelConfig(
        model=model_dir(), skip_tokenizer_init=True, max_model_len=1024, dtype="float32"
    )
    cache = CacheConfig(block_size=16, enable_prefix_caching=False)
    cache.num_gpu_blocks = 2000
    scheduler = SchedulerConfig(
        max_num_seqs=MAX_SEQS,
        max_num_batched_tokens=4096,
        max_model_len=1024,
        is_encoder_decoder=False,
        async_scheduling=async_scheduling,
    )
    spec = SpeculativeConfig(
        # vLLM accepts async scheduling with the GPU n-gram drafter only; the
        # scheduler never sees the difference.
        method="ngram_gpu" if async_scheduling else "ngram",
        num_speculative_tokens=MAX_K,
        prompt_lookup_min=2,
        prompt_lookup_max=4,
        num_speculative_tokens_per_batch_size=VLLM_TABLE if table is None else table,
    )
    cfg = VllmConfig(
        model_config=model,
        cache_config=cache,
        scheduler_config=scheduler,
        speculative_config=spec,
        device_config=DeviceConfig("cpu"),
    )
    # The CPU platform turns async scheduling off (it has no overlap to hide);
    # the scheduler classes are the same on every platform, so ask for it back.
    cfg.scheduler_config.async_scheduling = async_scheduling
    return cfg


def scheduler_kwargs(cfg: Any) -> dict[str, Any]:
    group = KVCacheGroupSpec(
        ["layer"],
        FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=1, dtype=torch.float32),
    )
    kv = KVCacheConfig(num_blocks=2000, kv_cache_tensors=[], kv_cache_groups=[group])
    return {
        "vllm_config": cfg,
        "kv_cache_config": kv,
        "structured_output_manager": StructuredOutputManager(cfg),
        "block_size": 16,
        "log_stats": True,
    }


class Driver:
    """Runs steps on a scheduler with synthetic model outputs of known acceptance.

    ``propose(step, request, k)`` is how many drafts the stand-in drafter
    gives a request after a step (default: all K); 0 gives an empty list, as
    an n-gram drafter does where the context has no match. The driver keeps
    its own record of every decoding request's (K its drafts were proposed
    at, drafts scheduled, accepted) and the context it had: the independent
    count the add-on's counters are checked against.
    """

    def __init__(
        self,
        scheduler: Any,
        accept: Callable[[int, int], int],
        propose: Callable[[int, str, int], int] | None = None,
    ) -> None:
        self.s = scheduler
        self.accept = accept  # (step, drafts) -> accepted
        self.propose = propose or (lambda step, rid, k: k)
        self.step_no = 0
        self.next_id = 0
        self.pairs: list[tuple[int, int]] = []
        self.triples: list[tuple[int, int, int]] = []
        self.contexts: list[int] = []
        self.trace: list[dict[str, int]] = []
        self._given_k: dict[str, int] = {}
        self._tokens: dict[str, int] = {}

    def add(self, n: int, max_tokens: int = 400) -> None:
        for _ in range(n):
            params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
            rid = f"r{self.next_id}"
            self.s.add_request(Request(rid, list(range(1, 9)), params, None))
            self._tokens[rid] = 8
            self.next_id += 1

    def finish(self, n: int) -> None:
        """Abort the n oldest running requests (the batch shrinks)."""
        running = [r.request_id for r in self.s.running][:n]
        from vllm.v1.request import RequestStatus

        self.s.finish_requests(running, RequestStatus.FINISHED_ABORTED)

    def step(self) -> dict[str, int]:
        so = self.s.schedule()
        ids = list(so.num_scheduled_tokens)
        sampled = []
        for rid in ids:
            drafts = so.scheduled_spec_decode_tokens.get(rid, [])
            accepted = min(self.accept(self.step_no, len(drafts)), len(drafts)) if drafts else 0
            if drafts:
                self.pairs.append((len(drafts), accepted))
            if rid in self._given_k:  # it decoded: drafts (maybe none) were given after a step
                self.triples.append((self._given_k[rid], len(drafts), accepted))
                self.contexts.append(self._tokens[rid] - 1)
            self._tokens[rid] += 1 + accepted
            sampled.append([11] * (1 + accepted))
        output = ModelRunnerOutput(
            req_ids=ids,
            req_id_to_index={r: i for i, r in enumerate(ids)},
            sampled_token_ids=sampled,
        )
        self.s.update_from_output(so, output)
        k = so.num_spec_tokens_to_schedule
        if ids:
            given = [[12] * self.propose(self.step_no, rid, k) for rid in ids]
            self.s.update_draft_token_ids(DraftTokenIds(ids, given))
            for rid in ids:
                self._given_k[rid] = k
        row = {"step": self.step_no, "bs": len(ids), "k": k}
        self.trace.append(row)
        self.step_no += 1
        return row

    def run(self, steps: int) -> list[dict[str, int]]:
        return [self.step() for _ in range(steps)]


@contextmanager
def addon_env(**values: str) -> Iterator[None]:
    keys = {f"SPECDEPLOY_{k.upper()}": v for k, v in values.items()}
    old = {k: os.environ.get(k) for k in keys}
    os.environ.update(keys)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def write_table(name: str, doc: dict[str, Any], profile: dict[str, Any] | None = None) -> Path:
    folder = SCRATCH / name
    folder.mkdir(exist_ok=True)
    table = folder / "table.json"
    table.write_text(json.dumps(doc))
    if profile is not None:
        (folder / "profile.json").write_text(json.dumps(profile))
    return table


def profile_spec() -> dict[str, Any]:
    import yaml

    spec: dict[str, Any] = yaml.safe_load(FIXTURE.read_text())["spec"]
    return spec


def sample(s: Any, name: str, **labels: str) -> float | None:
    value: float | None = s.specdeploy.metrics.registry.get_sample_value(
        name, {"pool": "cpu", **labels}
    )
    return value


def ramp(driver: Driver, sizes: list[int], steps_each: int) -> list[dict[str, int]]:
    """Hold each batch size for ``steps_each`` steps (growing by adds, shrinking by aborts)."""
    trace = []
    for size in sizes:
        running = len(driver.s.running) + len(driver.s.waiting)
        if size > running:
            driver.add(size - running)
        elif size < running:
            driver.finish(running - size)
        trace.extend(driver.run(steps_each))
    return trace


# --- scenarios ---------------------------------------------------------------------


def scenario_table_follows_batch_size() -> dict[str, Any]:
    doc = {"policy": "table", "maxK": MAX_K, "schedule": [[1, 2, 3], [3, 8, 1], [9, 16, 0]]}
    table = write_table("follows", doc)
    with addon_env(table_file=str(table), allowed_k="all", pool="cpu"):
        s = build()
    driver = Driver(s, lambda step, n: n)
    trace = ramp(driver, [1, 2, 6, 12, 3, 1], 6)
    return {
        "class": type(s).__name__,
        "lookup_class": type(s.dynamic_sd_lookup).__name__,
        "trace": trace,
        "steps_metric": {k: sample(s, "specdeploy_steps_total", k=str(k)) for k in range(4)},
    }


def scenario_adaptive_follows_batch_size() -> dict[str, Any]:
    doc = {"policy": "adaptive", "maxK": MAX_K, "schedule": [[1, 4, 3], [5, 16, 1]]}
    table = write_table("adaptive", doc, profile_spec())
    # The default (per-step) objective: the driver's synthetic steps take microseconds,
    # far from the fixture profile's costs, and this scenario is about K following the
    # batch size through the hooks.
    with addon_env(table_file=str(table), allowed_k="all", pool="cpu"):
        s = build()
    driver = Driver(s, lambda step, n: n)  # every draft accepted
    trace = ramp(driver, [1, 16, 1], 40)
    policy = s.specdeploy.controller.table.policy
    best = {bs: max(policy.explain(bs).values(), key=lambda e: e.goodput).k for bs in (1, 16)}
    return {"trace": trace, "best": best, "policy": type(policy).__name__}


def scenario_acceptance_counts() -> dict[str, Any]:
    """n-gram-like drafting: some requests propose nothing, some fewer than K, K changes."""
    doc = {"policy": "table", "maxK": MAX_K, "schedule": [[1, 3, 3], [4, 16, 1]]}
    table = write_table("acceptance", doc)
    with addon_env(table_file=str(table), allowed_k="all", pool="cpu"):
        s = build()
    records: list[Any] = []
    controller = s.specdeploy.controller
    finish = controller.finish_step

    def spy(*args: Any) -> Any:
        record = finish(*args)
        records.append(record)
        return record

    controller.finish_step = spy
    driver = Driver(
        s,
        lambda step, n: (step * 7 + driver.next_id) % (n + 1),
        lambda step, rid, k: (
            0 if (step + int(rid[1:])) % 3 == 0 else (step + int(rid[1:])) % (k + 1)
        ),
    )
    ramp(driver, [3, 5, 2], 10)
    counted = {
        str(i): [
            sample(s, name, position=str(i))
            for name in (
                "specdeploy_draft_positions_reached_total",
                "specdeploy_draft_tokens_total",
                "specdeploy_accepted_tokens_total",
            )
        ]
        for i in (1, 2, 3)
    }
    return {
        "pairs": driver.pairs,
        "triples": driver.triples,
        "contexts": driver.contexts,
        "counted": counted,
        "verified": sample(s, "specdeploy_verified_tokens_total"),
        "sequence_steps": sample(s, "specdeploy_decode_sequence_steps_total"),
        "record_contexts": sum(r.context_tokens for r in records),
        "record_verified": sum(r.verified_tokens for r in records),
        "timed_ks": sorted({r.k for r in records if r.step_seconds is not None}),
        "trace": driver.trace,
        "timed": [r.step_seconds is not None for r in records],
    }


def scenario_async_subclass() -> dict[str, Any]:
    doc = {"policy": "table", "maxK": MAX_K, "schedule": [[1, 2, 3], [3, 16, 1]]}
    table = write_table("async", doc)
    with addon_env(table_file=str(table), pool="cpu"):
        s = build(async_scheduling=True)
    driver = Driver(s, lambda step, n: n)
    trace = ramp(driver, [1, 4, 1], 8)
    return {
        "is_async": isinstance(s, AsyncScheduler),
        "class": type(s).__name__,
        "trace": trace,
        "drafts_verified": len(driver.pairs),
        "steps_counted": s.specdeploy.controller.steps,
    }


def scenario_k_zero_and_off() -> dict[str, Any]:
    """K=0 in the table; and policy off gives plain vLLM's K, step for step."""
    zero = write_table("zero", {"policy": "table", "maxK": MAX_K, "schedule": [[1, 16, 0]]})
    with addon_env(table_file=str(zero), allowed_k="all", pool="cpu"):
        s = build()
    d = Driver(s, lambda step, n: n)
    zero_trace = ramp(d, [2, 5], 5)
    off = write_table("off", {"policy": "off", "maxK": MAX_K, "schedule": VLLM_TABLE})
    with addon_env(table_file=str(off), pool="cpu"):
        addon = build()
    plain = Scheduler(**scheduler_kwargs(vllm_config()))
    traces = []
    for sched in (addon, plain):
        drv = Driver(sched, lambda step, n: n // 2)
        traces.append(ramp(drv, [1, 3, 7, 2], 6))
    return {
        "zero_trace": zero_trace,
        "zero_drafts": len(d.pairs),
        "off_trace": traces[0],
        "plain_trace": traces[1],
        "plain_class": type(plain).__name__,
    }


def scenario_hot_reload() -> dict[str, Any]:
    good = {"policy": "table", "maxK": MAX_K, "schedule": [[1, 16, 3]]}
    table = write_table("reload", good)
    with addon_env(table_file=str(table), allowed_k="all", pool="cpu", reload_seconds="3600"):
        s = build()
    watcher = s.specdeploy.watcher
    d = Driver(s, lambda step, n: n)
    d.add(2)
    k_first = d.run(3)[-1]["k"]
    table.write_text("{ not json")
    bad_swapped = watcher.check()
    k_after_bad = d.run(3)[-1]["k"]
    table.write_text(json.dumps({"policy": "table", "maxK": 9, "schedule": [[1, 16, 1]]}))
    watcher.check()
    k_after_maxk = d.run(3)[-1]["k"]
    table.write_text(json.dumps({"policy": "table", "maxK": MAX_K, "schedule": [[1, 16, 1]]}))
    good_swapped = watcher.check()
    k_after_good = d.run(3)[-1]["k"]
    table.unlink()
    watcher.check()
    k_after_delete = d.run(3)[-1]["k"]
    return {
        "k": [k_first, k_after_bad, k_after_maxk, k_after_good, k_after_delete],
        "swapped": [bad_swapped, good_swapped],
        "errors": sample(s, "specdeploy_table_reload_errors_total"),
        "generation": sample(s, "specdeploy_table_generation"),
        "last_error": s.specdeploy.controller.last_error,
    }


def scenario_missing_table() -> dict[str, Any]:
    with addon_env(table_file=str(SCRATCH / "nowhere" / "table.json"), pool="cpu"):
        s = build()
    d = Driver(s, lambda step, n: n)
    trace = ramp(d, [1, 6], 4)
    return {"trace": trace, "errors": sample(s, "specdeploy_table_reload_errors_total")}


def scenario_vllm_moved() -> dict[str, Any]:
    """A vLLM internal the add-on reads moved (its step reader raises): the engine keeps
    scheduling on vLLM's own lookup, the fault counted and the add-on off from then on."""
    from specdeploy.runtime.vllm_addon import scheduler as hooks

    doc = {"policy": "table", "maxK": MAX_K, "schedule": [[1, 2, 3], [3, 8, 0], [9, 16, 0]]}
    table = write_table("moved", doc)
    with addon_env(table_file=str(table), allowed_k="all", pool="cpu"):
        s = build()
    driver = Driver(s, lambda step, n: n)
    before = ramp(driver, [6], 4)

    def moved(*_a: Any, **_k: Any) -> Any:
        raise AttributeError(
            "'SchedulerOutput' object has no attribute 'scheduled_spec_decode_tokens'"
        )

    with mock.patch.object(hooks, "read_step", moved):  # the hooks' own binding
        after = ramp(driver, [6, 1], 4)
    return {
        "before": before,
        "after": after,
        "tripped": s.specdeploy.controller.tripped,
        "faults": sample(s, "specdeploy_addon_faults_total", where="read_step"),
    }


def scenario_internals() -> dict[str, Any]:
    """What the add-on relies on in vLLM; any False here means vLLM's internals moved."""
    table = write_table("internals", {"policy": "table", "maxK": MAX_K, "schedule": [[1, 16, 2]]})
    with addon_env(table_file=str(table), allowed_k="all", pool="cpu"):
        s = build()
    lookup = s.dynamic_sd_lookup
    asked = []
    original = lookup.controller.choose_k

    def spy(bs: int) -> int:
        asked.append(bs)
        return int(original(bs))

    lookup.controller.choose_k = spy
    d = Driver(s, lambda step, n: n)
    d.add(3)
    d.run(4)
    from vllm.v1.core.sched.output import SchedulerOutput

    fields = set(SchedulerOutput.__dataclass_fields__)
    return {
        "lookup_replaced": isinstance(lookup, PolicyLookup),
        "lookup_consulted": asked,
        "schedule_reads_lookup": "dynamic_sd_lookup[" in inspect.getsource(Scheduler.schedule),
        "output_fields": sorted(
            {
                "num_spec_tokens_to_schedule",
                "scheduled_spec_decode_tokens",
                "num_invalid_spec_tokens",
            }
            - fields
        ),
        "runner_fields": sorted(
            {"sampled_token_ids", "req_id_to_index"} - set(ModelRunnerOutput.__dataclass_fields__)
        ),
        "resolves": vllm_config()
        .scheduler_config.__class__(
            max_num_seqs=4,
            max_model_len=64,
            is_encoder_decoder=False,
            scheduler_cls="specdeploy.runtime.vllm_addon.scheduler_factory",
        )
        .get_scheduler_cls()
        is scheduler_factory,
    }


def scenario_data_parallel_refused() -> dict[str, Any]:
    cfg = vllm_config()
    cfg.parallel_config.data_parallel_size = 2  # vLLM itself drops the table for DP > 1
    try:
        with addon_env(pool="cpu"):
            scheduler_factory(**scheduler_kwargs(cfg))
    except Exception as err:
        return {"refused": type(err).__name__, "message": str(err)}
    return {"refused": None, "message": ""}


SCENARIOS = {
    name.removeprefix("scenario_"): fn
    for name, fn in sorted(globals().items())
    if name.startswith("scenario_") and callable(fn)
}


def main(out: str) -> int:
    results: dict[str, Any] = {}
    for name, fn in SCENARIOS.items():
        try:
            results[name] = fn()
        except Exception:
            results[name] = {"error": traceback.format_exc()}
    Path(out).write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
