"""Reading one vLLM engine step: drafts verified, acceptance, and what kind of step it was.

Shared by the profiler's measuring scheduler and the serving add-on, which both
look at the same two objects vLLM 0.32 passes to ``update_from_output``: the
``SchedulerOutput`` of the step and the ``ModelRunnerOutput`` it produced.
Nothing here imports vLLM: the functions read attributes only, so they are
tested without it, and a renamed attribute fails the real-engine contract tests.

Read them *before* calling ``super().update_from_output``: vLLM trims
``sampled_token_ids`` of a request that stops in the step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

DraftPairs = tuple[tuple[int, int], ...]
"""(drafted, accepted) per request whose drafts were verified in a step."""


def step_drafts(scheduler_output: Any, model_runner_output: Any) -> DraftPairs:
    """(drafted, accepted) for each request whose drafts were verified this step.

    drafted = the draft tokens scheduled for the request minus those a grammar
    invalidated; accepted = sampled tokens - 1 (the bonus or corrected token).
    """
    sampled = model_runner_output.sampled_token_ids
    if not sampled:
        return ()
    invalid = scheduler_output.num_invalid_spec_tokens or {}
    index = model_runner_output.req_id_to_index
    found = []
    for req_id, draft in scheduler_output.scheduled_spec_decode_tokens.items():
        row = index.get(req_id)
        if row is None or not draft:
            continue
        drafted = len(draft) - invalid.get(req_id, 0)
        accepted = max(len(sampled[row]) - 1, 0)
        found.append((drafted, min(accepted, drafted)))
    return tuple(found)


def is_pure_decode(scheduler_output: Any) -> bool:
    """Each request scheduled exactly one new token plus its drafts (no prefill)."""
    if scheduler_output.scheduled_new_reqs:
        return False
    spec = sum(len(v) for v in scheduler_output.scheduled_spec_decode_tokens.values())
    reqs = len(scheduler_output.num_scheduled_tokens)
    return bool(reqs) and scheduler_output.total_num_scheduled_tokens == reqs + spec


def verified_width(scheduler_output: Any) -> int:
    """The most drafts any request had verified this step (0: none)."""
    drafts = scheduler_output.scheduled_spec_decode_tokens
    return max((len(v) for v in drafts.values()), default=0)


def conditional_from_drafts(
    pairs: Sequence[tuple[int, int]], k: int
) -> tuple[list[int], list[int]]:
    """Per-position counts with conditional denominators (see ``policy.base``).

    ``pairs`` holds (drafted, accepted) per sequence and step; position i
    (1-based) counts as drafted when the sequence had at least i drafts and
    accepted its first i-1, as accepted when it accepted at least i.
    """
    # Position i counts as drafted for a pair when min(drafted, accepted + 1) > i and as
    # accepted when accepted > i: histogram those two numbers (two increments per
    # pair; vLLM hands over one pair per request per step), then take suffix sums.
    reach = [0] * (k + 1)
    took = [0] * (k + 1)
    for n_drafted, n_accepted in pairs:
        if n_drafted > k:
            n_drafted = k
        if n_accepted > n_drafted:
            n_accepted = n_drafted
        reach[n_drafted if n_drafted <= n_accepted else n_accepted + 1] += 1
        took[n_accepted] += 1
    drafted = [0] * k
    accepted = [0] * k
    d = a = 0
    for i in range(k - 1, -1, -1):
        d += reach[i + 1]
        a += took[i + 1]
        drafted[i] = d
        accepted[i] = a
    return drafted, accepted
