"""K=0 at plain-decoding cost: the speculative work a K=0 step skips inside vLLM.

With speculation configured, vLLM 0.32 does speculative work on every step,
also on a step whose K is 0 (the add-on's choice when speculation loses).
Measured inside vLLM's CPU engine (SmolLM2-135M, n-gram drafts, batch 16,
``bench/k0_step_cost.py``), against the same engine without speculation:

* the worker runs the drafter after sampling, with the step's K: the n-gram
  proposer launches its numba kernel over every request and, at K=0,
  returns nothing (about 2.5 ms of a 55-65 ms step);
* the engine core then asks the worker for those drafts (one RPC,
  ``take_draft_token_ids``) and hands them to the scheduler (about 0.5 ms).

This module removes both for drafters that keep no state between steps
(``method="ngram"``, the CPU n-gram proposer): at a step whose K is 0 the
worker returns empty drafts without running the drafter, and the engine
core skips the RPC. Both are what vLLM would have computed (an n-gram
proposal of length 0 is empty for every request), so nothing else changes.

Left alone, by design: drafters with state. EAGLE, MTP and draft models run
their first pass at K=0 to keep the drafter's KV cache in sync with the
target's tokens (``llm_base_proposer.propose``); skipping it breaks
acceptance when K comes back (vLLM #53426), so that pass is charged, not
removed. Suffix decoding updates its tree from every step's tokens.

What stays on a K=0 step after this (vLLM's, not reachable through a hook)
is measured and named by ``bench/k0_step_cost.py`` and charged by the
floor: the KV lookahead slots reserved for maxK, the scheduler's
speculative bookkeeping, and a slower sampler call with speculation
configured.

How it gets in: vLLM loads the ``vllm.general_plugins`` entry points
(pyproject.toml) in every process it starts (API server, engine core,
workers); ``register`` patches two methods there. It acts only in pods that
run the add-on (``SPECDEPLOY_TABLE_FILE`` set, as the operator's Deployment
and the benchmarks' add-on servers do) and in the profiler, which sets
``SPECDEPLOY_PLAIN_K0=on`` so that a profile's K=0 cells cost what a pod's
K=0 step costs; ``SPECDEPLOY_PLAIN_K0=off`` turns it off. vLLM's
``VLLM_PLUGINS``, when set, must name ``specdeploy_plain_k0``. Importing this
module does not import vLLM; ``register`` does.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from specdeploy.runtime.contract import PodEnv

log = logging.getLogger("specdeploy.addon")

SWITCH_ENV = "SPECDEPLOY_PLAIN_K0"
"""``off`` keeps vLLM's K=0 step as it is; ``on`` patches without the add-on (the
profiler, whose K=0 cells must cost what a pod's K=0 step costs); unset: on where
the add-on runs."""
_OFF = ("off", "0", "false", "no")
_ON = ("on", "1", "true", "yes")

STATELESS_METHODS = frozenset({"ngram"})
"""Speculative methods whose drafter keeps no state between steps (CPU n-gram)."""

_PATCHED = "_specdeploy_plain_k0"


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process belongs to an engine that runs the add-on, and the switch is on."""
    env = os.environ if environ is None else environ
    switch = env.get(SWITCH_ENV, "").strip().lower()
    if switch in _OFF:
        return False
    return switch in _ON or bool(env.get(PodEnv.TABLE_FILE.value, "").strip())


def stateless_drafter(speculative_config: Any) -> bool:
    """A drafter whose K=0 proposal is empty and leaves nothing behind."""
    return getattr(speculative_config, "method", None) in STATELESS_METHODS


def skipping_propose(original: Callable[..., Any]) -> Callable[..., Any]:
    """``GPUModelRunner.propose_draft_token_ids`` that proposes nothing at K=0.

    The step's K is ``scheduler_output.num_spec_tokens_to_schedule``, the one
    vLLM passes to the drafter. Only stateless drafters are skipped; any other
    goes to vLLM's method, as does every step with K > 0.
    """

    def propose_draft_token_ids(
        self: Any, scheduler_output: Any, sampled_token_ids: Any, *args: Any, **kwargs: Any
    ) -> Any:
        if scheduler_output.num_spec_tokens_to_schedule == 0 and stateless_drafter(
            self.speculative_config
        ):
            return [[] for _ in range(len(sampled_token_ids))]
        return original(self, scheduler_output, sampled_token_ids, *args, **kwargs)

    setattr(propose_draft_token_ids, _PATCHED, True)
    return propose_draft_token_ids


def skipping_draft_fetch(original: Callable[..., Any]) -> Callable[..., Any]:
    """``EngineCore.post_step`` that does not fetch drafts its scheduler knows are empty.

    The add-on's scheduler says so (``specdeploy_drafts_expected``) after a
    step scheduled at K=0 with a stateless drafter; any other scheduler, or
    an add-on that is off, keeps vLLM's fetch.
    """

    def post_step(self: Any, model_executed: bool) -> Any:
        expected = getattr(self.scheduler, "specdeploy_drafts_expected", None)
        if model_executed and expected is not None and not expected():
            return None
        return original(self, model_executed)

    setattr(post_step, _PATCHED, True)
    return post_step


def patch(owner: type, name: str, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> bool:
    """Replace ``owner.name`` by ``wrap(owner.name)`` once; False when already done."""
    current = getattr(owner, name)
    if getattr(current, _PATCHED, False):
        return False
    setattr(owner, name, wrap(current))
    return True


def register() -> None:
    """vLLM's general-plugin entry point: patch the worker's and the engine core's K=0 step.

    Runs in every vLLM process, possibly more than once (vLLM's own
    warning); patching is idempotent. A vLLM whose classes moved leaves the
    engine as it is, with one warning.
    """
    if not enabled():
        return
    from specdeploy.runtime.vllm_addon.assembly import ensure_logging

    ensure_logging()  # a worker's logging is vLLM's; the add-on's lines would be lost
    try:
        from vllm.v1.engine.core import EngineCore
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    except ImportError as missing:
        log.warning("specdeploy: K=0 steps keep vLLM's speculative work (%s)", missing)
        return
    done = patch(GPUModelRunner, "propose_draft_token_ids", skipping_propose)
    done |= patch(EngineCore, "post_step", skipping_draft_fetch)
    if done:
        log.info(
            "specdeploy: K=0 steps skip a stateless drafter and its draft fetch (pid %d)",
            os.getpid(),
        )
