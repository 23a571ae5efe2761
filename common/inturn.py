"""Calls that take turns in one thread job: a parked call's later runs, without a pool trip each.

Handing one call to a thread pool and its answer back to the event loop
costs a future on each side, a callback chained between them and a wake-up
of a sleeping thread. When one message wakes 1,000 parked reads of a
process, each read runs again; with a trip each, those hand-offs are about
a sixth of a woken read's CPU in a py-spy profile of ``make bench``'s
broadcast, and under a request gate of one seat (SQLite) the threads that
take them also queue at the gate, waking each other in turn.

``InTurn.run`` queues a call instead: one job in the pool runs the queued
calls one after another, and each answer goes back to the loop as soon as
its call returns. At most ``jobs`` such jobs run at once, as many as the
request gate admits anyway. A job ends when it finds nothing queued; its
end is booked on the loop, where calls are queued, so a call queued just
as the last job found the queue empty starts the next job instead of
waiting for none.

Only calls that never wait in their thread belong here (a parked call's
later runs answer or park again): one that waited would hold up every call
queued behind it.
"""

from __future__ import annotations

import asyncio
import collections
import weakref
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

from common.pause import pause_point

T = TypeVar("T")


class InTurn:
    def __init__(self, executor: Callable[[], Executor], jobs: int) -> None:
        self._executor = executor  # read at each job's start: the pool of the moment
        self._jobs = jobs
        # Per event loop: a worker's loop lasts its life, a test runs several in turn.
        self._turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Turns] = (
            weakref.WeakKeyDictionary()
        )

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a thread of the executor, in turn with the other queued calls."""
        loop = asyncio.get_running_loop()
        turns = self._turns.get(loop)
        if turns is None:
            turns = self._turns[loop] = _Turns(loop, self._executor, self._jobs)
        answer = loop.create_future()
        turns.queue.append((fn, args, answer))
        if turns.running < turns.jobs:
            turns.start()
        return await answer


class _Turns:
    """One event loop's queue of calls and the jobs running them."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, executor: Callable[[], Executor], jobs: int
    ) -> None:
        self.loop = loop
        self.executor = executor
        self.jobs = jobs
        self.running = 0  # jobs submitted and not yet ended; read and written on the loop
        self.queue: collections.deque[tuple[Callable[..., Any], tuple, asyncio.Future]] = (
            collections.deque()
        )

    def start(self) -> None:
        self.running += 1
        try:
            self.executor().submit(self._job)
        except BaseException as exc:  # a pool shut down: no job will take what is queued
            self.running -= 1
            while self.queue:
                _fail(self.queue.popleft()[2], exc)

    def _job(self) -> None:
        loop = self.loop
        try:
            while True:
                try:
                    fn, args, answer = self.queue.popleft()
                except IndexError:
                    break
                if answer.cancelled():  # its caller is gone (a stopping worker)
                    continue
                try:
                    result = fn(*args)
                except BaseException as exc:  # the caller's to handle, as from run_in_executor
                    loop.call_soon_threadsafe(_fail, answer, exc)
                else:
                    loop.call_soon_threadsafe(_succeed, answer, result)
            pause_point("inturn.emptied")
        finally:
            loop.call_soon_threadsafe(self._ended)

    def _ended(self) -> None:
        self.running -= 1
        if self.queue and self.running < self.jobs:
            self.start()


def _succeed(answer: asyncio.Future, result: Any) -> None:
    if not answer.done():
        answer.set_result(result)


def _fail(answer: asyncio.Future, exc: BaseException) -> None:
    if not answer.done():
        answer.set_exception(exc)
