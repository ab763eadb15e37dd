"""Reading one vLLM engine step: which requests decoded, what each proposed, verified and accepted.

Shared by the profiler's measuring scheduler and the serving add-on, which both
look at the same two objects vLLM 0.32 passes to ``update_from_output``: the
``SchedulerOutput`` of the step and the ``ModelRunnerOutput`` it produced.
Nothing here imports vLLM: the functions read attributes only, so they are
tested without it, and a renamed attribute fails the real-engine contract tests.

Acceptance has one definition (``goodput``): per *decoding* request of a step,
the triple (K, proposal length L, accepted), and a position the drafter did
not propose counts as reached and rejected. What vLLM 0.32 shows
(``vllm/v1/core/sched/scheduler.py``, ``output.py``):

* The decoding requests are the running ones (``scheduled_cached_reqs``, not
  ``resumed_req_ids``, which recompute their prefill) that have produced a
  token already (``num_output_tokens > 0``) and whose scheduled tokens are
  exactly one new token plus their drafts. A prefill chunk schedules more;
  a request's first step is a new request (``scheduled_new_reqs``).
* A request whose drafter proposed nothing is *absent* from
  ``scheduled_spec_decode_tokens`` (``schedule()`` only adds non-empty
  drafts), or present with an empty list: either way L = 0, and it still
  reached position 1. Grammar-invalidated drafts are padded with -1 and
  counted in ``num_invalid_spec_tokens``: they are not proposals.
* The drafts a step verifies were proposed after the *previous* step's
  forward pass, with that step's ``num_spec_tokens_to_schedule`` ("number of
  spec tokens to schedule for the next step"), so K is the previous
  scheduled step's value, which the caller passes in. A request skipped for
  a step keeps older drafts; when L exceeds the K given, K is raised to L so
  that L <= K always holds.
* accepted = sampled tokens - 1 (the bonus or corrected token), at most L.
* The context a decoding request reads is its ``num_computed_tokens`` at
  scheduling time (``scheduled_cached_reqs.num_computed_tokens``, a list the
  scheduler builds anyway): reading it costs one index.

Read them *before* calling ``super().update_from_output``: vLLM trims
``sampled_token_ids`` of a request that stops in the step.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import accumulate
from typing import Any, NamedTuple

from specdeploy.runtime.goodput import DraftCounts

Triple = tuple[int, int, int]
"""(K, proposal length L <= K, accepted <= L) of one decoding request in one step."""


class StepReading(NamedTuple):
    """What one step's decoding requests did (module docstring)."""

    k: int
    """K of the step's drafts: the K given, or the longest proposal if longer."""
    requests: tuple[Triple, ...]
    verified_tokens: int
    """Tokens the decoding requests verified: sum of 1 + L."""
    context_tokens: int
    """Their context before the step: sum of ``num_computed_tokens``."""


NO_DECODE = StepReading(0, (), 0, 0)


def read_step(scheduler_output: Any, model_runner_output: Any, k: int) -> StepReading:
    """The triples of every decoding request of the step, with verified and context tokens.

    ``k`` is the ``num_spec_tokens_to_schedule`` of the step scheduled
    before this one (module docstring). One pass over the running requests,
    a few dictionary lookups each.
    """
    sampled = model_runner_output.sampled_token_ids
    cached = scheduler_output.scheduled_cached_reqs
    ids = cached.req_ids
    if not sampled or not ids:
        return NO_DECODE
    resumed = cached.resumed_req_ids
    computed = cached.num_computed_tokens
    outputs = cached.num_output_tokens
    scheduled = scheduler_output.num_scheduled_tokens
    drafts = scheduler_output.scheduled_spec_decode_tokens
    invalid = scheduler_output.num_invalid_spec_tokens
    index = model_runner_output.req_id_to_index
    rows = len(sampled)
    found: list[tuple[int, int]] = []
    verified = context = longest = 0
    for i, req_id in enumerate(ids):
        if outputs[i] <= 0 or (resumed and req_id in resumed):
            continue
        draft = drafts.get(req_id)
        length = len(draft) if draft else 0
        if scheduled.get(req_id) != 1 + length:
            continue  # a prefill chunk (or not scheduled at all)
        row = index.get(req_id)
        if row is None or row >= rows:
            continue
        got = len(sampled[row])
        if got == 0:
            continue
        verified += 1 + length
        context += computed[i]
        if length and invalid:
            length -= invalid.get(req_id, 0)
        accepted = got - 1
        if accepted > length:
            accepted = length
        if length > longest:
            longest = length
        found.append((length, accepted))
    if not found:
        return NO_DECODE
    step_k = k if k >= longest else longest
    return StepReading(
        step_k,
        tuple((step_k, length, accepted) for length, accepted in found),
        verified,
        context,
    )


def count_drafts(requests: Iterable[Triple], positions: int) -> DraftCounts:
    """``goodput.reached_counts``, fast: a few increments per request, no loop over positions.

    Position i (1-based) is reached by a request when i <= min(K, accepted + 1),
    proposed when i <= min(L, accepted + 1), accepted when i <= accepted,
    offered when i <= L and scheduled when i <= K. So each count per position
    is a suffix sum of a histogram of one number per request; index 0 of a
    histogram counts nothing, so a request that proposed nothing (most
    n-gram sequence-steps) costs two increments.
    """
    size = positions + 1
    reach = [0] * size
    prop = [0] * size
    took = [0] * size
    offer = [0] * size
    sched = [0] * size
    for k, length, accepted in requests:
        if k > positions:
            k = positions
        sched[k] += 1
        if length <= 0:
            if k:
                reach[1] += 1
            continue
        if length > k:
            length = k
        if accepted > length:
            accepted = length
        top = accepted + 1
        reach[k if k < top else top] += 1
        prop[length if length < top else top] += 1
        took[accepted] += 1
        offer[length] += 1
    return DraftCounts(_above(reach), _above(prop), _above(took), _above(offer), _above(sched))


def _above(histogram: list[int]) -> list[int]:
    """``out[i]`` = how many values exceed i, for i = 0..len-2 (a reversed running sum)."""
    out = list(accumulate(reversed(histogram)))
    out.reverse()
    del out[0]
    return out


def is_pure_decode(scheduler_output: Any) -> bool:
    """Each request scheduled exactly one new token plus its drafts (no prefill)."""
    if scheduler_output.scheduled_new_reqs:
        return False
    spec = sum(len(v) for v in scheduler_output.scheduled_spec_decode_tokens.values())
    reqs = len(scheduler_output.num_scheduled_tokens)
    return bool(reqs) and scheduler_output.total_num_scheduled_tokens == reqs + spec
