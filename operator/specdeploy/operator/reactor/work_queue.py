"""Reconcile slots, handed out fairly: spec changes first, then namespace by namespace.

Why: at start (and after a watch re-list) kopf delivers an event for every
deployment at once; every one of them asked the default thread pool for a
thread, first come first served. A namespace with 100 deployments then held
every thread for the time of 100 reconciles, and a deployment a user had just
created waited behind all of them (issue #18: Ready within 30 s under the load
of 500). Here at most ``workers`` reconciles run at a time; a waiting one is
woken in this order: a spec change (a user's edit, a new deployment: the
thing someone is watching), then one waiter per namespace in turn (round
robin), FIFO within a namespace.

The queue is bounded by the deployments: the reconciler coalesces, so a key
waits here at most once (``reconciler.Reconciler.reconcile``).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class FairSlots:
    """At most ``workers`` holders at once; waiters woken as the module doc says."""

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        self.workers = workers
        self._running = 0
        self._urgent: deque[asyncio.Future[None]] = deque()
        self._by_namespace: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()

    @property
    def waiting(self) -> int:
        """Waiters not yet woken (the queue depth)."""
        return len(self._urgent) + sum(len(q) for q in self._by_namespace.values())

    @property
    def running(self) -> int:
        return self._running

    @asynccontextmanager
    async def slot(self, namespace: str, *, urgent: bool = False) -> AsyncIterator[None]:
        """Hold one slot for the body; wait for it in the order above."""
        await self._acquire(namespace, urgent)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, namespace: str, urgent: bool) -> None:
        if self._running < self.workers and not self.waiting:
            self._running += 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if urgent:
            self._urgent.append(waiter)
        else:
            self._by_namespace.setdefault(namespace, deque()).append(waiter)
        try:
            await waiter  # woken holding the slot (``_wake`` counted it)
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._release()  # woken, then cancelled before it ran: pass the slot on
            else:
                self._forget(waiter)
            raise

    def _release(self) -> None:
        self._running -= 1
        self._wake()

    def _wake(self) -> None:
        while self._running < self.workers:
            waiter = self._next()
            if waiter is None:
                return
            if waiter.done():  # cancelled while waiting
                continue
            self._running += 1
            waiter.set_result(None)

    def _next(self) -> asyncio.Future[None] | None:
        if self._urgent:
            return self._urgent.popleft()
        while self._by_namespace:
            namespace, queue = next(iter(self._by_namespace.items()))
            waiter = queue.popleft()
            if queue:
                self._by_namespace.move_to_end(namespace)  # the next namespace goes next
            else:
                del self._by_namespace[namespace]
            return waiter
        return None

    def _forget(self, waiter: asyncio.Future[None]) -> None:
        if waiter in self._urgent:
            self._urgent.remove(waiter)
            return
        for namespace, queue in list(self._by_namespace.items()):
            if waiter in queue:
                queue.remove(waiter)
                if not queue:
                    del self._by_namespace[namespace]
                return
