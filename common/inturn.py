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

A call that waits in its thread (a poll past the process's parked calls,
``mailbox/wakeups.py``) steps aside (``aside``, from the request gate's
``stepped_aside``): its seat goes to a new job for the calls queued behind
it, and a job that finds more jobs running than seats once its call is back
ends, so the seats are kept. Every run of a call goes through here when the
gate has seats (SQLite): behind a gate of one seat, calls handed to the pool
each on its own wake a thread that only queues at the gate, and threads
waking one another there cost about a quarter of the floor's CPU
(``bench/compare.py``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
import weakref
from collections.abc import Callable, Iterator
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
        turns.queue.append((fn, args, answer, time.perf_counter()))
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
        self.queue: collections.deque[tuple[Callable[..., Any], tuple, asyncio.Future, float]] = (
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
        _current.turns = self
        try:
            # More jobs than seats: one came back from stepping aside. This one ends.
            while self.running <= self.jobs:
                try:
                    fn, args, answer, queued_at = self.queue.popleft()
                except IndexError:
                    pause_point("inturn.emptied")
                    break
                if answer.cancelled():  # its caller is gone (a stopping worker)
                    continue
                _current.waited = time.perf_counter() - queued_at
                try:
                    result = fn(*args)
                except BaseException as exc:  # the caller's to handle, as from run_in_executor
                    loop.call_soon_threadsafe(_fail, answer, exc)
                else:
                    loop.call_soon_threadsafe(_succeed, answer, result)
                finally:
                    _current.waited = 0.0
                pause_point("inturn.answered")  # before the seats are counted again
        finally:
            _current.turns = None
            loop.call_soon_threadsafe(self._freed)

    def _freed(self) -> None:
        """A job ended, or its call stepped aside: its seat goes to what is queued."""
        self.running -= 1
        if self.queue and self.running < self.jobs:
            self.start()

    def _back(self) -> None:
        self.running += 1


# The queue the current thread's job takes its calls from, and how long its
# call waited there (the request gate observes that wait with its own).
_current = threading.local()


@contextlib.contextmanager
def aside() -> Iterator[None]:
    """The current call waits in its thread: its job's seat goes to the calls queued behind it."""
    turns = getattr(_current, "turns", None)
    if turns is None:
        yield
        return
    turns.loop.call_soon_threadsafe(turns._freed)
    try:
        yield
    finally:
        turns.loop.call_soon_threadsafe(turns._back)


def waited() -> float:
    """Seconds the current thread's call waited in its queue (0 outside a job)."""
    return getattr(_current, "waited", 0.0)


def _succeed(answer: asyncio.Future, result: Any) -> None:
    if not answer.done():
        answer.set_result(result)


def _fail(answer: asyncio.Future, exc: BaseException) -> None:
    if not answer.done():
        answer.set_exception(exc)
