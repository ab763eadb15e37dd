"""The K=0 step's skips (``vllm_addon.plain_step``) on stand-ins for vLLM's classes.

vLLM itself is exercised by ``tests/model/test_addon_e2e.py`` (the plugin
loads in the server's worker and engine core) and measured by
``bench/k0_step_cost.py``; here: which steps skip and which do not.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from specdeploy.runtime.vllm_addon import assembly, plain_step


class Runner:
    """Stands in for ``GPUModelRunner``: counts the drafter's runs (on ``device``)."""

    def __init__(self, method: str | None, device: str = "cpu") -> None:
        self.speculative_config = SimpleNamespace(method=method)
        self.device = SimpleNamespace(type=device)
        self.drafted = 0

    def propose_draft_token_ids(
        self, scheduler_output: Any, sampled_token_ids: list[list[int]], *rest: Any
    ) -> list[list[int]]:
        self.drafted += 1
        k = scheduler_output.num_spec_tokens_to_schedule
        return [[7] * k for _ in sampled_token_ids]


class Core:
    """Stands in for ``EngineCore``: counts the draft fetches."""

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        self.fetched = 0

    def post_step(self, model_executed: bool) -> None:
        if model_executed:
            self.fetched += 1


def step(k: int) -> SimpleNamespace:
    """A step with a prefill riding along (its K=0 pass is not timed: ``test_k0_pass``)."""
    return SimpleNamespace(
        num_spec_tokens_to_schedule=k,
        num_scheduled_tokens={"a": 30},
        scheduled_spec_decode_tokens={},
        total_num_scheduled_tokens=30,
    )


def patched_runner_class() -> type[Runner]:
    cls = type("PatchedRunner", (Runner,), {})
    assert plain_step.patch(cls, "propose_draft_token_ids", plain_step.skipping_propose)
    return cls


def test_a_k0_step_skips_the_ngram_drafter_and_proposes_nothing() -> None:
    runner = patched_runner_class()("ngram")
    assert runner.propose_draft_token_ids(step(0), [[1], [2], [3]]) == [[], [], []]
    assert runner.drafted == 0
    assert runner.propose_draft_token_ids(step(2), [[1], [2]]) == [[7, 7], [7, 7]]
    assert runner.drafted == 1


def test_drafters_with_state_run_at_k0() -> None:
    """EAGLE's K=0 pass keeps its KV in sync (vLLM #53426); suffix updates its tree."""
    cls = patched_runner_class()
    for method in ("eagle", "eagle3", "mtp", "draft_model", "suffix", "ngram_gpu"):
        runner = cls(method)
        assert runner.propose_draft_token_ids(step(0), [[1]]) == [[]]
        assert runner.drafted == 1, method


def test_patching_twice_wraps_once() -> None:
    cls = patched_runner_class()
    assert not plain_step.patch(cls, "propose_draft_token_ids", plain_step.skipping_propose)
    runner = cls("eagle")
    runner.propose_draft_token_ids(step(0), [[1]])
    assert runner.drafted == 1


def test_the_engine_core_skips_the_fetch_only_when_its_scheduler_says_so() -> None:
    cls = type("PatchedCore", (Core,), {})
    plain_step.patch(cls, "post_step", plain_step.skipping_draft_fetch)
    expected = [True]
    addon = cls(SimpleNamespace(specdeploy_drafts_expected=lambda: expected[0]))
    addon.post_step(True)
    expected[0] = False
    addon.post_step(True)
    assert addon.fetched == 1
    vllms_own = cls(SimpleNamespace())
    vllms_own.post_step(True)
    assert vllms_own.fetched == 1


class Sampling:
    """Stands in for ``GPUModelRunner._sample``: records which path each step took."""

    def __init__(self, logprobs: int | None = None, token_ids: dict[int, list[int]] | None = None):
        self.input_batch = SimpleNamespace(
            sampling_metadata=SimpleNamespace(
                max_num_logprobs=logprobs, logprob_token_ids=token_ids
            )
        )
        self.paths: list[str] = []

    def _sample(self, logits: Any, spec_decode_metadata: Any) -> str:
        self.paths.append("plain" if spec_decode_metadata is None else "rejection")
        return self.paths[-1]


def drafts(*per_request: int) -> SimpleNamespace:
    """Speculative metadata as vLLM builds it: ``max_spec_len`` is the longest draft."""
    return SimpleNamespace(num_draft_tokens=list(per_request), max_spec_len=max(per_request))


def test_a_step_without_drafts_samples_plainly_and_one_with_drafts_verifies_them() -> None:
    cls = type("PatchedSampling", (Sampling,), {})
    assert plain_step.patch(cls, "_sample", plain_step.plain_sampling)
    runner = cls()
    assert runner._sample("logits", drafts(0, 0, 0)) == "plain"
    assert runner._sample("logits", drafts(0, 2, 0)) == "rejection"
    assert runner._sample("logits", None) == "plain", "a plain engine's step is untouched"
    assert not plain_step.patch(cls, "_sample", plain_step.plain_sampling)


def test_logprob_requests_keep_the_rejection_path_at_k0() -> None:
    """Its logprobs come from another computation; the shortcut claims equality only without."""
    cls = type("PatchedSampling", (Sampling,), {})
    plain_step.patch(cls, "_sample", plain_step.plain_sampling)
    assert cls(logprobs=5)._sample("logits", drafts(0, 0)) == "rejection"
    assert cls(token_ids={0: [3]})._sample("logits", drafts(0)) == "rejection"
    assert cls(logprobs=None, token_ids={})._sample("logits", drafts(0)) == "plain"


def test_pods_that_run_the_addon_and_the_profiler_unless_switched_off() -> None:
    table = {"SPECDEPLOY_TABLE_FILE": "/etc/specdeploy/table.json"}
    assert plain_step.enabled(table)
    assert not plain_step.enabled({})
    assert not plain_step.enabled({"SPECDEPLOY_TABLE_FILE": " "})
    for off in ("off", "0", "false", "No"):
        assert not plain_step.enabled({**table, plain_step.SWITCH_ENV: off})
    assert plain_step.enabled({**table, plain_step.SWITCH_ENV: "on"})
    assert plain_step.enabled({plain_step.SWITCH_ENV: "on"}), "the profiler has no table file"


def test_register_acts_only_in_addon_pods(monkeypatch: Any, caplog: Any) -> None:
    """No vLLM in the project's venv: an add-on pod would say so, others stay silent."""
    caplog.set_level("INFO", logger="specdeploy.addon")
    monkeypatch.setattr(assembly, "ensure_logging", lambda: None)  # keeps caplog's handler
    monkeypatch.delenv("SPECDEPLOY_TABLE_FILE", raising=False)
    plain_step.register()
    assert not caplog.records
    monkeypatch.setenv("SPECDEPLOY_TABLE_FILE", "/etc/specdeploy/table.json")
    plain_step.register()
    assert "keep vLLM's speculative work" in caplog.text


def test_the_fetch_after_a_k0_step_is_skipped_for_drafters_whose_k0_proposal_is_empty() -> None:
    """EAGLE keeps its K=0 pass (its KV), yet proposes nothing: no drafts to fetch."""
    for method in ("ngram", "eagle", "eagle3", "draft_model"):
        assert plain_step.empty_at_k0(SimpleNamespace(method=method)), method
    for other in ("mtp", "suffix", "medusa", "custom_class", None):
        assert not plain_step.empty_at_k0(SimpleNamespace(method=other)), other
    assert not plain_step.stateless_drafter(SimpleNamespace(method="eagle"))
