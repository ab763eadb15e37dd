"""The fair reconcile slots: bounded, spec changes first, namespaces in turn (issue #18)."""

from __future__ import annotations

import asyncio

import pytest

from specdeploy.operator.reactor.work_queue import FairSlots


async def _hold(
    slots: FairSlots,
    ns: str,
    order: list[str],
    gate: asyncio.Event,
    *,
    urgent: bool = False,
    tag: str = "",
) -> None:
    async with slots.slot(ns, urgent=urgent):
        order.append(tag or ns)
        await gate.wait()


def _run_order(jobs: list[tuple[str, bool, str]], workers: int = 1) -> tuple[list[str], int]:
    """Start a blocker, queue ``jobs`` (namespace, urgent, tag), then release all: the order
    in which they got a slot, and the most that ever held one at once."""

    async def run() -> tuple[list[str], int]:
        slots = FairSlots(workers)
        order: list[str] = []
        most = 0
        opened = asyncio.Event()
        blockers = [
            asyncio.create_task(_hold(slots, "blocker", [], opened)) for _ in range(workers)
        ]
        await asyncio.sleep(0)
        gate = asyncio.Event()
        gate.set()  # queued ones finish at once, once they get a slot
        tasks = []
        for ns, urgent, tag in jobs:
            tasks.append(asyncio.create_task(_hold(slots, ns, order, gate, urgent=urgent, tag=tag)))
            await asyncio.sleep(0)
        assert slots.waiting == len(jobs)
        opened.set()
        while any(not t.done() for t in tasks):
            most = max(most, slots.running)
            await asyncio.sleep(0)
        await asyncio.gather(*blockers, *tasks)
        assert slots.running == 0 and slots.waiting == 0
        return order, most

    return asyncio.run(run())


def test_namespaces_take_turns_instead_of_the_busiest_holding_every_slot() -> None:
    jobs = [("big", False, f"big{i}") for i in range(4)] + [("small", False, "small0")]
    order, _ = _run_order(jobs)
    assert order == ["big0", "small0", "big1", "big2", "big3"]


def test_a_spec_change_goes_before_everything_waiting() -> None:
    jobs = [("big", False, f"big{i}") for i in range(3)] + [("new", True, "created")]
    order, _ = _run_order(jobs)
    assert order[0] == "created"


def test_no_more_than_the_workers_hold_a_slot() -> None:
    jobs = [(f"ns{i % 3}", False, f"j{i}") for i in range(12)]
    order, most = _run_order(jobs, workers=2)
    assert sorted(order) == sorted(tag for _, _, tag in jobs)
    assert most <= 2


def test_a_waiter_cancelled_in_the_queue_does_not_take_a_slot() -> None:
    async def run() -> list[str]:
        slots = FairSlots(1)
        order: list[str] = []
        opened = asyncio.Event()
        blocker = asyncio.create_task(_hold(slots, "b", [], opened))
        await asyncio.sleep(0)
        done = asyncio.Event()
        done.set()
        gone = asyncio.create_task(_hold(slots, "x", order, done, tag="gone"))
        kept = asyncio.create_task(_hold(slots, "y", order, done, tag="kept"))
        await asyncio.sleep(0)
        gone.cancel()
        await asyncio.sleep(0)
        opened.set()
        await asyncio.gather(blocker, kept)
        assert slots.running == 0 and slots.waiting == 0
        return order

    assert asyncio.run(run()) == ["kept"]


def test_workers_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        FairSlots(0)
