"""Calls taking turns in one job (common/inturn.py), on an event loop of the test's own.

No database: what is tested is the hand-off. The woken reads that use it
through the server's front are tested in ``tests/rooms/test_reading_fanout.py``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from common import inturn
from common.gate import RequestGate
from common.inturn import InTurn
from tests.common.test_gate import gate_waits
from tests.races import TIMEOUT, held_at


class CountingPool(ThreadPoolExecutor):
    """A thread pool that counts the jobs handed to it."""

    def __init__(self, threads: int) -> None:
        super().__init__(threads)
        self.submitted = 0

    def submit(self, fn, /, *args, **kwargs):
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


@pytest.fixture
def pool():
    pool = CountingPool(4)
    yield pool
    pool.shutdown(wait=True)


def test_calls_queued_together_run_in_one_job_and_each_gets_its_own_answer(pool):
    turns = InTurn(lambda: pool, jobs=1)
    go = threading.Event()
    threads: list[int] = []

    def call(n: int) -> int:
        if n == 0:  # the first holds its job until every other call is queued
            assert go.wait(TIMEOUT)
        threads.append(threading.get_ident())
        return n * 10

    async def main() -> list[int]:
        calls = [asyncio.ensure_future(turns.run(call, n)) for n in range(5)]
        await asyncio.sleep(0)  # each call queued
        go.set()
        return await asyncio.wait_for(asyncio.gather(*calls), TIMEOUT)

    assert asyncio.run(main()) == [0, 10, 20, 30, 40]
    assert pool.submitted == 1
    assert len(set(threads)) == 1


def test_an_error_reaches_its_own_caller_only(pool):
    turns = InTurn(lambda: pool, jobs=1)

    def call(n: int) -> int:
        if n == 1:
            raise ValueError("the second call fails")
        return n

    async def main() -> list:
        calls = [turns.run(call, n) for n in range(3)]
        return await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), TIMEOUT)

    first, second, third = asyncio.run(main())
    assert (first, third) == (0, 2)
    assert isinstance(second, ValueError)


def test_jobs_never_outnumber_the_seats(pool):
    turns = InTurn(lambda: pool, jobs=2)
    go = threading.Event()
    inside = 0
    most = 0
    guard = threading.Lock()

    def call(n: int) -> int:
        nonlocal inside, most
        with guard:
            inside += 1
            most = max(most, inside)
        assert go.wait(TIMEOUT)
        with guard:
            inside -= 1
        return n

    async def main() -> list[int]:
        calls = [asyncio.ensure_future(turns.run(call, n)) for n in range(6)]
        await asyncio.sleep(0)
        while inside < 2:  # each seat's job has taken a call (TIMEOUT bounds the test)
            await asyncio.sleep(0.01)
        go.set()
        return await asyncio.wait_for(asyncio.gather(*calls), TIMEOUT)

    assert asyncio.run(asyncio.wait_for(main(), TIMEOUT)) == list(range(6))
    assert most == 2
    assert pool.submitted == 2


def test_a_call_queued_as_the_last_job_found_nothing_left_starts_the_next_job(pool):
    """The job has found the queue empty and not yet ended when a call is queued.

    The call sees every seat taken and starts no job; the ending job, booked
    on the loop after its last look, must start one for it.
    """
    turns = InTurn(lambda: pool, jobs=1)

    async def main() -> str:
        with held_at("inturn.emptied") as held:
            first = asyncio.ensure_future(turns.run(lambda: "first"))
            await asyncio.to_thread(held.wait_reached)
            assert await asyncio.wait_for(first, TIMEOUT) == "first"
            second = asyncio.ensure_future(turns.run(lambda: "second"))
            await asyncio.sleep(0)  # queued, with the only seat still taken
            assert pool.submitted == 1
            held.release()
            return await asyncio.wait_for(second, TIMEOUT)

    assert asyncio.run(main()) == "second"
    assert pool.submitted == 2


def test_each_event_loop_has_its_own_queue(pool):
    """A loop closed while its job still runs (a test's; a worker's lasts its life) holds
    up no other: that job's end can no longer be booked on it."""
    turns = InTurn(lambda: pool, jobs=1)
    with held_at("inturn.emptied") as held:
        assert asyncio.run(asyncio.wait_for(turns.run(lambda: "one"), TIMEOUT)) == "one"
        held.wait_reached()
        held.release()  # the job ends with its loop closed: its seat is never given back

    assert asyncio.run(asyncio.wait_for(turns.run(lambda: "two"), TIMEOUT)) == "two"


def stepping_aside(
    aside: threading.Event, back: threading.Event, order: list[str] | None = None
) -> Callable[[], str]:
    """A call that waits in its thread, as a poll past the parked bound does, until ``back``."""

    def waits() -> str:
        with inturn.aside():
            aside.set()
            assert back.wait(TIMEOUT)
        if order is not None:
            order.append("waiter")
        return "waited"

    return waits


def test_a_call_that_steps_aside_gives_its_seat_to_the_calls_queued_behind_it(pool):
    """A call waiting in its thread (a poll past the parked bound) holds up no other."""
    turns = InTurn(lambda: pool, jobs=1)
    aside, back = threading.Event(), threading.Event()
    order: list[str] = []
    waits = stepping_aside(aside, back, order)

    def other() -> str:
        order.append("other")
        return "other"

    async def main() -> list[str]:
        waiting = asyncio.ensure_future(turns.run(waits))
        await asyncio.to_thread(aside.wait, TIMEOUT)
        answered = await asyncio.wait_for(turns.run(other), TIMEOUT)
        back.set()
        return [answered, await asyncio.wait_for(waiting, TIMEOUT)]

    assert asyncio.run(main()) == ["other", "waited"]
    assert order == ["other", "waiter"]
    assert pool.submitted == 2


def test_seats_given_up_by_stepping_aside_come_back(pool):
    """Once the call that stepped aside is back and done, the jobs are the seats again."""
    turns = InTurn(lambda: pool, jobs=1)
    aside, back = threading.Event(), threading.Event()
    waits = stepping_aside(aside, back)

    async def main() -> tuple[int, list[str]]:
        loop = asyncio.get_running_loop()
        waiting = asyncio.ensure_future(turns.run(waits))
        await asyncio.to_thread(aside.wait, TIMEOUT)
        await asyncio.wait_for(turns.run(lambda: "meanwhile"), TIMEOUT)
        back.set()
        await asyncio.wait_for(waiting, TIMEOUT)
        queue = turns._turns[loop]
        while queue.running:  # every job has ended (TIMEOUT bounds the test)
            await asyncio.sleep(0.01)
        during = pool.submitted
        after = await asyncio.wait_for(
            asyncio.gather(*(turns.run(lambda n=n: n) for n in range(3))), TIMEOUT
        )
        return pool.submitted - during, after

    started, answers = asyncio.run(asyncio.wait_for(main(), TIMEOUT))
    assert answers == [0, 1, 2]
    assert started == 1  # one job for the three: one seat, as before the wait


def test_stepping_aside_outside_a_job_changes_nothing():
    with inturn.aside():
        assert inturn.waited() == 0.0


def test_the_wait_in_the_queue_is_observed_with_the_gate_wait(pool):
    """plumb_gate_wait_seconds holds the wait behind the call ahead, though it was spent
    on the event loop and the gate itself was free by the time the call reached it."""
    turns = InTurn(lambda: pool, jobs=1)
    gate = RequestGate(1)
    first_in, first_out = threading.Event(), threading.Event()

    def call(n: int) -> int:
        with gate.admitted():
            if n == 0:
                first_in.set()
                assert first_out.wait(TIMEOUT)
        return n

    count_before, sum_before = gate_waits()

    async def main() -> list[int]:
        calls = [asyncio.ensure_future(turns.run(call, n)) for n in range(2)]
        await asyncio.to_thread(first_in.wait, TIMEOUT)
        await asyncio.sleep(0.3)
        first_out.set()
        return await asyncio.wait_for(asyncio.gather(*calls), TIMEOUT)

    assert asyncio.run(main()) == [0, 1]
    count_after, sum_after = gate_waits()
    assert count_after - count_before == 2  # once per call
    assert sum_after - sum_before >= 0.3  # the second waited that long, in the queue


def test_a_job_back_from_stepping_aside_ends_when_it_finds_more_jobs_than_seats(pool):
    """The call that stepped aside is back and answered; a job took its seat meanwhile.

    The job of the call that came back is held once it has answered, until
    the loop has counted it back; a call is then queued. That job must end
    rather than take it: the call waits for the other job, behind the call
    that job holds.
    """
    turns = InTurn(lambda: pool, jobs=1)
    aside, back, go = threading.Event(), threading.Event(), threading.Event()
    threads: dict[str, int] = {}
    waits = stepping_aside(aside, back)

    def holds() -> str:
        threads["holder"] = threading.get_ident()
        assert go.wait(TIMEOUT)
        return "held"

    def queued() -> str:
        threads["queued"] = threading.get_ident()
        return "queued"

    async def main() -> tuple[list[str], bool]:
        waiting = asyncio.ensure_future(turns.run(waits))
        await asyncio.to_thread(aside.wait, TIMEOUT)
        holding = asyncio.ensure_future(turns.run(holds))
        while "holder" not in threads:  # the second job has its call (TIMEOUT bounds the test)
            await asyncio.sleep(0.01)
        with held_at("inturn.answered") as held:
            back.set()
            answered = await asyncio.wait_for(waiting, TIMEOUT)  # counted back by now
            await asyncio.to_thread(held.wait_reached)
            seats = turns._turns[asyncio.get_running_loop()]
            assert seats.running == 2
            last = asyncio.ensure_future(turns.run(queued))
            await asyncio.sleep(0)  # queued, with both jobs counted
            held.release()
            while seats.running == 2 and not last.done():
                await asyncio.sleep(0.01)
            ran_before_its_turn = last.done()
        go.set()
        results = [answered, await asyncio.wait_for(holding, TIMEOUT)]
        return [*results, await asyncio.wait_for(last, TIMEOUT)], ran_before_its_turn

    answers, ran_before_its_turn = asyncio.run(asyncio.wait_for(main(), TIMEOUT))
    assert answers == ["waited", "held", "queued"]
    assert not ran_before_its_turn
    assert threads["queued"] == threads["holder"]
    assert pool.submitted == 2
