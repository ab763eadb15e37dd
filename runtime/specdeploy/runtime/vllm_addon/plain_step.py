"""K=0 at plain-decoding cost: the speculative work a K=0 step skips inside vLLM.

With speculation configured, vLLM 0.32 does speculative work on every step,
also on a step whose K is 0 (the add-on's choice when speculation loses).
Measured inside vLLM's CPU engine (SmolLM2-135M, n-gram drafts, batch 16,
``bench/k0_step_cost.py``), against the same engine without speculation:

* the worker runs the drafter after sampling, with the step's K: the n-gram
  proposer launches its numba kernel over every request and, at K=0,
  returns nothing (about 2.5 ms of a 55-65 ms step);
* the engine core then asks the worker for those drafts (one RPC,
  ``take_draft_token_ids``) and hands them to the scheduler (about 0.5 ms),
  for every drafter, though at K=0 there are none;
* the worker samples through the rejection sampler even when no request
  carries a draft (``_prepare_inputs`` builds speculative metadata for every
  step once speculation is configured): a float32 copy of the logits for
  the bonus token's logprobs, then the rejection kernels over zero drafts.

This module removes the first for drafters that keep no state between
steps (``method="ngram"``, the CPU n-gram proposer): at a step whose K is 0
the worker returns empty drafts without running the drafter, which is what
vLLM would have computed (an n-gram proposal of length 0 is empty for every
request). The engine core skips the RPC after a K=0 step for the n-gram,
EAGLE and draft-model drafters (``EMPTY_AT_K0_METHODS``), whose K=0
proposals vLLM leaves empty.

The third goes for every drafter: a step where no request carries a draft
(K=0, or an n-gram lookup that found nothing) samples with vLLM's plain
sampler, as a plain engine does. With zero drafts the rejection sampler's
output is its bonus token, sampled by that same sampler from the same
logits (one row per request), and the worker parses a one-column result the
same way whichever produced it. Steps that ask for logprobs keep vLLM's
path (its logprobs are computed another way).

Left alone, by design: drafters with state. EAGLE, MTP and draft models run
their first pass at K=0 to keep the drafter's KV cache in sync with the
target's tokens (``llm_base_proposer.propose``); skipping it breaks
acceptance when K comes back (vLLM #53426), so that pass is charged, not
removed (``bench/k0_anatomy.py`` measures it; ``k0_pass`` times it live, so
a K=0 step minus its pass prices a plain step). Suffix decoding updates its
tree from every step's tokens.

What stays on a K=0 step after this (vLLM's, not reachable through a hook)
is measured and named by ``bench/k0_step_cost.py`` and
``bench/k0_anatomy.py`` and charged by the floor: the KV lookahead slots
reserved for maxK, the speculative metadata built for every step, and the
scheduler's speculative bookkeeping: together at most 0.2 ms per step on the
CPU engine (95% upper ends; ``bench/results/k0_anatomy.md``).

How it gets in: vLLM loads the ``vllm.general_plugins`` entry points
(pyproject.toml) in every process it starts (API server, engine core,
workers); ``register`` patches three methods there. It acts only in pods that
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

from specdeploy.runtime.contract import K0_PASS_DRAFTERS, STATELESS_DRAFTERS, PodEnv
from specdeploy.runtime.vllm_addon import k0_pass

log = logging.getLogger("specdeploy.addon")

SWITCH_ENV = "SPECDEPLOY_PLAIN_K0"
"""``off`` keeps vLLM's K=0 step as it is; ``on`` patches without the add-on (the
profiler, whose K=0 cells must cost what a pod's K=0 step costs); unset: on where
the add-on runs."""
_OFF = ("off", "0", "false", "no")
_ON = ("on", "1", "true", "yes")

EMPTY_AT_K0_METHODS = STATELESS_DRAFTERS | K0_PASS_DRAFTERS
"""Methods whose K=0 proposal vLLM 0.32 leaves empty: the n-gram lookup of length 0,
and ``SpecDecodeBaseProposer.propose`` (EAGLE, EAGLE-3, draft models), which returns
an empty tensor after the K=0 pass that keeps the drafter's KV in sync. The draft
fetch after a K=0 step brings nothing for them (MTP is left out: some MTP
proposers override ``propose``)."""

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
    return getattr(speculative_config, "method", None) in STATELESS_DRAFTERS


def empty_at_k0(speculative_config: Any) -> bool:
    """A drafter that proposes nothing on a K=0 step (its K=0 pass, if any, still runs)."""
    return getattr(speculative_config, "method", None) in EMPTY_AT_K0_METHODS


def skipping_propose(original: Callable[..., Any]) -> Callable[..., Any]:
    """``GPUModelRunner.propose_draft_token_ids`` that proposes nothing at K=0.

    The step's K is ``scheduler_output.num_spec_tokens_to_schedule``, the one
    vLLM passes to the drafter. Only stateless drafters are skipped; any other
    goes to vLLM's method, as does every step with K > 0. The K=0 pass of a
    drafter in ``EMPTY_AT_K0_METHODS`` is timed (``k0_pass``).
    """

    def propose_draft_token_ids(
        self: Any, scheduler_output: Any, sampled_token_ids: Any, *args: Any, **kwargs: Any
    ) -> Any:
        if scheduler_output.num_spec_tokens_to_schedule != 0:
            return original(self, scheduler_output, sampled_token_ids, *args, **kwargs)
        if stateless_drafter(self.speculative_config):
            return [[] for _ in range(len(sampled_token_ids))]
        if empty_at_k0(self.speculative_config):
            return k0_pass.timed_pass(
                self,
                lambda: original(self, scheduler_output, sampled_token_ids, *args, **kwargs),
                scheduler_output,
            )
        return original(self, scheduler_output, sampled_token_ids, *args, **kwargs)

    setattr(propose_draft_token_ids, _PATCHED, True)
    return propose_draft_token_ids


def skipping_draft_fetch(original: Callable[..., Any]) -> Callable[..., Any]:
    """``EngineCore.post_step`` that does not fetch drafts its scheduler knows are empty.

    The add-on's scheduler says so (``specdeploy_drafts_expected``) after a
    step scheduled at K=0 with a drafter in ``EMPTY_AT_K0_METHODS``; any
    other scheduler, or an add-on that is off, keeps vLLM's fetch. Skipping
    it leaves the scheduler as the fetch would: vLLM clears each request's
    drafts when it schedules them, and the fetch would set them to nothing.
    """

    def post_step(self: Any, model_executed: bool) -> Any:
        expected = getattr(self.scheduler, "specdeploy_drafts_expected", None)
        if model_executed and expected is not None and not expected():
            return None
        return original(self, model_executed)

    setattr(post_step, _PATCHED, True)
    return post_step


def plain_sampling(original: Callable[..., Any]) -> Callable[..., Any]:
    """``GPUModelRunner._sample`` that samples plainly when no request carries a draft.

    vLLM passes speculative metadata on every step once speculation is
    configured; with zero drafts (``max_spec_len`` 0) its rejection path
    only adds work, so the step takes vLLM's own plain branch (metadata
    None). Logprob requests keep the rejection path.
    """

    def _sample(self: Any, logits: Any, spec_decode_metadata: Any) -> Any:
        if spec_decode_metadata is not None and spec_decode_metadata.max_spec_len == 0:
            sampling = self.input_batch.sampling_metadata
            if sampling.max_num_logprobs is None and not sampling.logprob_token_ids:
                return original(self, logits, None)
        return original(self, logits, spec_decode_metadata)

    setattr(_sample, _PATCHED, True)
    return _sample


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
    k0_pass.claim_path()  # before this process starts the engine's others, which inherit it
    done = patch(GPUModelRunner, "propose_draft_token_ids", skipping_propose)
    done |= patch(GPUModelRunner, "_sample", plain_sampling)
    done |= patch(EngineCore, "post_step", skipping_draft_fetch)
    if done:
        log.info(
            "specdeploy: K=0 steps skip a stateless drafter and its draft fetch (pid %d)",
            os.getpid(),
        )
        log.info("specdeploy: steps without drafts sample plainly (pid %d)", os.getpid())
