"""The group commit's gathering (common/groupcommit.py), on its own event loop.

``tests/rooms/test_reading_fanout.py`` drives it through the server's front
with real woken reads; here a count stands for the woken runs under way, so
that when a commit starts is decided by the test, not by timing.
"""

from __future__ import annotations

import asyncio

import pytest
from django.db import connections

from common import groupcommit

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def committer():
    """A group commit whose woken runs under way the test sets (``running[0]``)."""
    running = [0]
    group = groupcommit.GroupCommit(gathering=lambda: running[0])
    yield group, running
    group.executor.submit(connections.close_all).result()
    group.executor.shutdown()


def test_a_commit_waits_for_the_woken_runs_under_way_and_takes_their_writes(committer, monkeypatch):
    monkeypatch.setattr(groupcommit, "GATHER_SECONDS", 30.0)  # never what ends it here
    group, running = committer
    applied: list[list[int]] = []

    def apply(items: list[int]) -> None:
        applied.append(items)

    async def finish(item: int) -> None:
        # As the front does: a woken run ends and hands in its write in one step.
        running[0] -= 1
        await group.commit([(apply, item)])

    async def scenario() -> list[list[int]]:
        running[0] = 2  # two more woken runs under way
        first = asyncio.create_task(group.commit([(apply, 1)]))
        await asyncio.sleep(0.05)
        second = asyncio.create_task(finish(2))
        await asyncio.sleep(0.05)
        seen_while_running = list(applied)
        third = asyncio.create_task(finish(3))
        await asyncio.wait_for(asyncio.gather(first, second, third), 10)
        return seen_while_running

    seen_while_running = asyncio.run(scenario())

    assert seen_while_running == []
    assert applied == [[1, 2, 3]]


def test_a_commit_with_no_woken_run_beside_it_starts_at_once(committer, monkeypatch):
    monkeypatch.setattr(groupcommit, "GATHER_SECONDS", 30.0)
    group, _ = committer
    applied: list[list[int]] = []

    async def scenario() -> None:
        await asyncio.wait_for(group.commit([(applied.append, 1)]), 10)

    asyncio.run(scenario())

    assert applied == [[1]]


def test_gathering_ends_at_its_bound_when_the_runs_go_on(committer, monkeypatch):
    monkeypatch.setattr(groupcommit, "GATHER_SECONDS", 0.05)
    group, running = committer
    running[0] = 1  # a run that never ends, as far as the commit can tell
    applied: list[list[int]] = []

    async def scenario() -> None:
        await asyncio.wait_for(group.commit([(applied.append, 1)]), 10)

    asyncio.run(scenario())

    assert applied == [[1]]
