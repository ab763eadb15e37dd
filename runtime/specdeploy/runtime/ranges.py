"""A K schedule's shape: inclusive (first batch size, last batch size, K) ranges, and vLLM's rules.

The shape vLLM's ``speculative_config.num_speculative_tokens_per_batch_size``
takes, shared by the profile (its ``spec.schedule``), the schedule derived
from measurements (``schedule``), the operator's tables and the add-on. Its
own module, below both ``profile`` and ``schedule``, so that the profile can
validate a schedule without importing the code that derives one. Pure.

vLLM's rules, as read in vllm-project/vllm (0.32 line):

``vllm/v1/spec_decode/dynamic/utils.py``, ``validate_and_normalize_dynamic_sd_schedule``
  * the table must be a non-empty list;
  * every entry is a 3-item sequence ``(range_start, range_end, K)``, each item
    passed through ``int()`` (``vllm/config/speculative.py`` types the field as
    ``list[tuple[int, int, int]] | None``, so pydantic also checks the arity);
  * ``range_start > 0`` and ``range_end > 0``; ``range_start <= range_end``;
  * ``K >= 0``;
  * entries are sorted by ``range_start`` and then must not overlap (a start
    at or below the previous end is an error: "non-overlapping and sorted");
  * the first range must start at 1.

``build_dynamic_sd_schedule_lookup`` (same file), called from
``Scheduler.__init__`` in ``vllm/v1/core/sched/scheduler.py`` with
``vllm_max_batch_size=scheduler_config.max_num_seqs`` and
``vllm_num_speculative_tokens=num_spec_tokens``:
  * both must be > 0 (``SpeculativeConfig.num_speculative_tokens`` is also
    declared ``gt=0``), so a table needs maxK >= 1;
  * a dense list of ``max_num_seqs + 1`` ints; index 0 is unused and left 0 so
    that ``lookup[batch_size]`` needs no offset;
  * a gap between ranges inherits the previous range's K, and every batch size
    after the last range (up to ``max_num_seqs``) inherits the last K; ranges
    past ``max_num_seqs`` are ignored;
  * every K is clamped to ``min(num_speculative_tokens, K)``.
The scheduler reads ``lookup[len(num_scheduled_tokens)]`` once per step
(only when something is scheduled): the index counts every scheduled request,
prefills included.

Validation happens when the scheduler is built, i.e. at engine start, so a bad
table kills the pod. Our own rules on top, so we never depend on vLLM's
forgiveness: K <= maxK (no reliance on clamping), entries exactly three real
ints (no bools, no floats), and entries already sorted.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
Range = tuple[int, int, int]
"""One inclusive schedule entry: (first batch size, last batch size, K)."""


class ScheduleError(ValueError):
    """A batch-size table vLLM would refuse; ``problems`` lists every rule broken."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid schedule: " + "; ".join(problems))


# --- the grids -----------------------------------------------------------


def compress(best: Sequence[int] | IntArray) -> list[Range]:
    """Inclusive ranges from a per-batch-size K list (index = batch size, 0 ignored)."""
    ranges: list[Range] = []
    for bs in range(1, len(best)):
        k = int(best[bs])
        if ranges and ranges[-1][2] == k:
            ranges[-1] = (ranges[-1][0], bs, k)
        else:
            ranges.append((bs, bs, k))
    return ranges


def k_at(schedule: Sequence[Sequence[int]], batch_size: int) -> int:
    """The K vLLM runs at ``batch_size`` under ``schedule`` (the last range covers the tail)."""
    k = int(schedule[0][2])
    for lo, _, range_k in schedule:
        if lo <= batch_size:
            k = int(range_k)
    return k


def format_schedule(schedule: Sequence[Sequence[int]]) -> str:
    """The compact human form used in status and tables: ``1-16:5 17-64:3``."""
    return " ".join(f"{lo}-{hi}:{k}" for lo, hi, k in schedule)


# --- vLLM's rules --------------------------------------------------------


def _well_formed(entry: object) -> bool:
    """Exactly three ints (bools are ints to Python, never to us)."""
    return (
        isinstance(entry, list | tuple)
        and len(entry) == 3
        and all(isinstance(v, int) and not isinstance(v, bool) for v in entry)
    )


def _entry_problems(i: int, entry: object, max_k: int) -> Iterator[str]:
    """Problems of one entry taken alone (shape, signs, bounds)."""
    if not _well_formed(entry):
        yield f"[{i}]: must be [bsLo, bsHi, k], three integers, got {entry!r}"
        return
    assert isinstance(entry, list | tuple)
    lo, hi, k = entry
    if lo < 1 or hi < 1:
        yield f"[{i}]: batch sizes must be >= 1, got range {lo}-{hi}"
    elif lo > hi:
        yield f"[{i}]: range start {lo} is after its end {hi}"
    if k < 0:
        yield f"[{i}]: k must be >= 0, got {k}"
    elif k > max_k:
        yield f"[{i}]: k={k} exceeds maxK={max_k} (vLLM would clamp it; we never rely on that)"


def _order_problems(entries: list[Range]) -> Iterator[str]:
    """Problems between entries: first start, order, overlap."""
    if entries[0][0] != 1:
        yield f"[0]: the first range must start at batch size 1, got {entries[0][0]}"
    for i in range(1, len(entries)):
        (plo, phi, _), (lo, hi, _) = entries[i - 1], entries[i]
        if lo < plo:
            yield f"[{i}]: ranges must be sorted; {lo}-{hi} comes after {plo}-{phi}"
        elif lo <= phi:
            yield f"[{i}]: range {lo}-{hi} overlaps the previous range {plo}-{phi}"


def schedule_problems(schedule: object, *, max_k: int) -> Iterator[str]:
    """Every rule of vLLM (plus ours, see the module docstring) the table breaks.

    Each problem starts with ``[i]`` (entry i) or ``:`` (the whole table) so the
    caller can prefix the field's path, e.g. ``spec.schedule[2]: ...``.
    """
    if not isinstance(schedule, list | tuple):
        yield f": must be a list of [bsLo, bsHi, k] entries, got {type(schedule).__name__}"
        return
    if not schedule:
        yield ": must not be empty (vLLM refuses an empty table)"
        return
    if max_k < 1:
        yield f": needs maxK >= 1 (vLLM's num_speculative_tokens must be > 0), got {max_k}"
    for i, entry in enumerate(schedule):
        yield from _entry_problems(i, entry, max_k)
    if all(_well_formed(e) for e in schedule):
        yield from _order_problems([(e[0], e[1], e[2]) for e in schedule])


def _vllm_problems(ranges: object) -> list[str]:
    """vLLM's own rules only (it sorts for us and clamps K, so those pass)."""
    if not isinstance(ranges, list | tuple):
        return [": must be a list of [bsLo, bsHi, k] entries"]
    unbounded = 1 << 62  # vLLM has no upper K bound: it clamps instead
    if all(_well_formed(e) for e in ranges):
        ranges = sorted(ranges, key=lambda e: int(e[0]))
    return list(schedule_problems(ranges, max_k=unbounded))


def validate_vllm(ranges: object) -> list[Range]:
    """The table as vLLM accepts it, sorted; raise ScheduleError where vLLM would."""
    problems = _vllm_problems(ranges)
    if problems:
        raise ScheduleError(problems)
    assert isinstance(ranges, list | tuple)
    return sorted((int(e[0]), int(e[1]), int(e[2])) for e in ranges)


def to_vllm(schedule: Sequence[Sequence[int]]) -> list[list[int]]:
    """The JSON-ready value for ``num_speculative_tokens_per_batch_size``."""
    return [[int(lo), int(hi), int(k)] for lo, hi, k in schedule]


def from_vllm(ranges: object, num_speculative_tokens: int) -> list[Range]:
    """A vLLM table in our canonical form: contiguous from 1, clamped, equal K merged.

    Gaps take the previous K and every K is clamped to
    ``num_speculative_tokens``, exactly as vLLM expands it; the result covers
    1..(last configured batch size); beyond it vLLM repeats the last K. A test seam:
    no serving path reads a vLLM table back; the tests and ``specdeploy table`` 's tests
    compare tables in this form with what vLLM expands (``expand_lookup``).
    """
    if num_speculative_tokens < 1:
        raise ValueError(f"num_speculative_tokens must be > 0, got {num_speculative_tokens}")
    entries = validate_vllm(ranges)
    result: list[Range] = []
    for i, (lo, hi, k) in enumerate(entries):
        end = entries[i + 1][0] - 1 if i + 1 < len(entries) else hi  # a gap inherits k
        k = min(k, num_speculative_tokens)
        if result and result[-1][2] == k:
            result[-1] = (result[-1][0], end, k)
        else:
            result.append((lo, end, k))
    return result


def expand_lookup(ranges: object, num_speculative_tokens: int, max_batch_size: int) -> list[int]:
    """vLLM's dense ``dynamic_sd_lookup``: ``lookup[n]`` is K for n scheduled requests.

    Length ``max_batch_size + 1`` (vLLM passes ``max_num_seqs``); index 0 is 0
    and unused. Each batch size takes the K of the last range starting at or
    below it, which is the range holding it, or the one before a gap, or the
    last range for the tail; clamped to ``num_speculative_tokens``.
    """
    if max_batch_size < 1:
        raise ValueError(f"max_batch_size must be > 0, got {max_batch_size}")
    if num_speculative_tokens < 1:
        raise ValueError(f"num_speculative_tokens must be > 0, got {num_speculative_tokens}")
    entries = validate_vllm(ranges)
    lookup = [0] * (max_batch_size + 1)
    for lo, _, k in entries:
        if lo <= max_batch_size:
            lookup[lo:] = [min(k, num_speculative_tokens)] * (max_batch_size + 1 - lo)
    return lookup


__all__ = [
    "IntArray",
    "Range",
    "ScheduleError",
    "compress",
    "expand_lookup",
    "format_schedule",
    "from_vllm",
    "k_at",
    "schedule_problems",
    "to_vllm",
    "validate_vllm",
]
