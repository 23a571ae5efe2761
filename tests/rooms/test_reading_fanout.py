"""One message wakes many members waiting in ``read_messages``; their read positions
join a group commit (``common/groupcommit.py``) instead of one write each.

Driven in-process through the server's front (``plumb_site/asgi.py``), as
``tests/plumb_site/test_asgi.py`` does, so that the commit can be held open at
its critical point (``groupcommit.applied``: written, not committed) while a
second connection looks or sends. On SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import plumb_site.asgi as front
from common import groupcommit, inturn, wake
from mailbox import wakeups
from mailbox.models import Session
from mailbox.services import note_leave
from rooms import services
from rooms.errors import UnreadMessages
from rooms.models import Member
from rooms.services import reading
from tests.conftest import threads_close_their_connections
from tests.factories import SessionFactory, WorkspaceFactory
from tests.plumb_site.test_asgi import Client, authorized, staying, until
from tests.races import Racer, blocked_or_done, held_at

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def one_thread(monkeypatch):
    """Django gets one thread: the woken reads run one after another, taking turns
    as behind SQLite's one-seat gate (``common/inturn.py``) on either database. Its
    connection, and the group commit thread's, are closed after the test (PostgreSQL
    drops the test database only once nobody uses it)."""
    threads = ThreadPoolExecutor(1)
    monkeypatch.setattr(front, "django_threads", threads)
    monkeypatch.setattr(front, "_in_turn", inturn.InTurn(lambda: threads, jobs=1))
    yield
    threads_close_their_connections(threads, 1)
    threads.shutdown()
    threads_close_their_connections(front._group_commit.executor, 1)


@pytest.fixture
def hall():
    """alice speaks in ``hall``; bob and carol are members who have read it all."""
    workspace = WorkspaceFactory(slug="main")
    people = {n: SessionFactory(workspace=workspace, name=n) for n in ("alice", "bob", "carol")}
    services.room_create(people["alice"], slug="hall")
    for name in ("bob", "carol"):
        services.room_join(people[name], "hall")
    head = services.read_position_set(people["alice"], "hall", seq=3)[0].head_seq
    for name in ("bob", "carol"):
        services.read_position_set(people[name], "hall", seq=head)
    return people


def read_seq(session) -> int:
    return Member.objects.get(room__slug="hall", name_id=session.name_id).read_seq


def wait_call(session, target: str = "/api/v1/rooms/hall/messages/?wait=20"):
    poll = staying()
    task = asyncio.create_task(
        front.application(authorized(target, session.raw_token), poll.receive, poll.send)
    )
    return poll, task


def read_now(session) -> dict:
    client = Client([(b"", False)])
    asyncio.run(
        front.application(
            authorized("/api/v1/rooms/hall/messages/", session.raw_token),
            client.receive,
            client.send,
        )
    )
    assert client.status == 200, client.sent
    return client.json()


def send(session, body: str, **kwargs):
    return services.message_send(session, "hall", body=body, **kwargs)


def test_a_woken_read_is_answered_only_once_its_read_position_is_committed(one_thread, hall):
    bob = hall["bob"]
    before = read_seq(bob)

    with held_at("groupcommit.applied") as held:

        async def scenario():
            poll, task = wait_call(bob)
            await until(lambda: front.parked_calls() == 1, "bob's read parked")
            sent = await asyncio.to_thread(send, hall["alice"], "all wake")
            await asyncio.to_thread(held.wait_reached)
            # Written in the held transaction, not committed: no answer has gone out,
            # and any other connection still reads bob's old position.
            seen_meanwhile = await asyncio.to_thread(read_seq, bob)
            answered_meanwhile = poll.status
            held.release()
            await asyncio.wait_for(task, 10)
            return poll, sent, seen_meanwhile, answered_meanwhile

        poll, sent, seen_meanwhile, answered_meanwhile = asyncio.run(scenario())

    assert answered_meanwhile is None
    assert seen_meanwhile == before
    assert poll.status == 200
    body = poll.json()
    assert [e["message"]["body"] for e in body["events"]] == ["all wake"]
    assert body["read_seq"] == sent.message.seq == read_seq(bob)
    # Read again (any process reads the same row): nothing new, and nothing unseen.
    assert read_now(bob)["events"] == []
    assert send(bob, "read it", require_read=True).message.seq == sent.message.seq + 1


def test_a_message_sent_while_the_advance_is_held_stays_unseen_for_require_read(one_thread, hall):
    """The woken read moves bob to the message it returned, never past the one sent
    while its position was being committed; require_read counts that one."""
    bob = hall["bob"]

    with held_at("groupcommit.applied") as held:

        async def scenario():
            poll, task = wait_call(bob)
            await until(lambda: front.parked_calls() == 1, "bob's read parked")
            first = await asyncio.to_thread(send, hall["alice"], "first")
            await asyncio.to_thread(held.wait_reached)
            # A second connection sends while bob's advance is written, uncommitted.
            second = Racer(lambda: send(hall["carol"], "second"), name="carol's send")
            second.start()
            state = await asyncio.to_thread(blocked_or_done, second)
            held.release()
            await asyncio.wait_for(task, 10)
            return poll, first, await asyncio.to_thread(second.outcome), state

        poll, first, second, state = asyncio.run(scenario())

    # SQLite: the send queued behind the held commit; PostgreSQL: it did not need it.
    assert state == ("blocked" if connection.vendor == "sqlite" else "done")
    assert [e["message"]["body"] for e in poll.json()["events"]] == ["first"]
    assert poll.json()["read_seq"] == first.message.seq == read_seq(bob)
    with pytest.raises(UnreadMessages) as refused:
        send(bob, "too soon", require_read=True)
    assert [e.seq for e in refused.value.events] == [second.message.seq]
    again = read_now(bob)
    assert [e["message"]["body"] for e in again["events"]] == ["second"]
    assert again["read_seq"] == second.message.seq == read_seq(bob)


def test_a_message_committed_after_the_woken_page_was_read_stays_unseen(one_thread, hall):
    """Held between its page and its position: the position (committed later, in the
    group) is the page's last event, never the head a later send made."""
    bob = hall["bob"]

    with held_at("read.paged") as held:

        async def scenario():
            poll, task = wait_call(bob)
            await until(lambda: front.parked_calls() == 1, "bob's read parked")
            first = await asyncio.to_thread(send, hall["alice"], "first")
            await asyncio.to_thread(held.wait_reached)
            second = await asyncio.to_thread(send, hall["carol"], "second")
            held.release()
            await asyncio.wait_for(task, 10)
            return poll, first, second

        poll, first, second = asyncio.run(scenario())

    assert [e["message"]["body"] for e in poll.json()["events"]] == ["first"]
    assert poll.json()["read_seq"] == first.message.seq == read_seq(bob)
    with pytest.raises(UnreadMessages) as refused:
        send(bob, "too soon", require_read=True)
    assert [e.seq for e in refused.value.events] == [second.message.seq]
    assert [e["message"]["body"] for e in read_now(bob)["events"]] == ["second"]


def test_one_message_wakes_every_reader_and_their_positions_commit_together(
    one_thread, hall, monkeypatch
):
    """Held at its first commit until every other woken read has deferred its write:
    two commits for the lot, and one UPDATE of read positions in the second. (No
    gathering: the first commit starts with the first read's write alone.)"""
    monkeypatch.setattr(groupcommit, "GATHER_SECONDS", 0)
    readers = [hall["bob"], hall["carol"]]
    workspace = hall["bob"].workspace
    for i in range(4):
        reader = SessionFactory(workspace=workspace, name=f"reader-{i}")
        services.room_join(reader, "hall")
        readers.append(reader)
    head = services.read_position_set(hall["alice"], "hall", seq=7)[0].head_seq
    for reader in readers:
        services.read_position_set(reader, "hall", seq=head)
    batches: list[list[tuple[int, int]]] = []
    advance = reading.read_positions_advance

    def counted(advances):
        batches.append(list(advances))
        with CaptureQueriesContext(connection) as queries:
            advance(advances)
        batches[-1] = (len(advances), len(queries))

    monkeypatch.setattr(reading, "read_positions_advance", counted)

    with held_at("groupcommit.applied") as held:

        async def scenario():
            polls = [wait_call(reader) for reader in readers]
            await until(lambda: front.parked_calls() == len(readers), "every read parked")
            sent = await asyncio.to_thread(send, hall["alice"], "to all")
            await asyncio.to_thread(held.wait_reached)
            # The first commit took what was deferred when it started: the first
            # read's advance, and any other that finished before its task ran.
            first = batches[0][0]
            await until(
                lambda: sum(len(w) for w, _ in front._group_commit.pending) == len(readers) - first,
                "every other woken read deferred its advance",
            )
            held.release()
            await asyncio.wait_for(asyncio.gather(*(task for _, task in polls)), 10)
            return [poll for poll, _ in polls], sent, first

        polls, sent, first = asyncio.run(scenario())

    for poll in polls:
        assert [e["message"]["body"] for e in poll.json()["events"]] == ["to all"]
        assert poll.json()["read_seq"] == sent.message.seq
    assert [read_seq(r) for r in readers] == [sent.message.seq] * len(readers)
    # (reads in the batch, UPDATE statements): the first commit's, then all the others at once.
    rest = len(readers) - first
    assert batches == [(first, 1)] + ([(rest, 1)] if rest else [])


def test_a_deferred_write_that_fails_answers_503_never_the_read(one_thread, hall, monkeypatch):
    """Without its advance committed, the read's events would come back as new: the
    answer is an error instead, and the position stays where it was."""
    bob = hall["bob"]
    before = read_seq(bob)

    def fails(advances):
        raise RuntimeError("the database refused the write")

    monkeypatch.setattr(reading, "read_positions_advance", fails)

    async def scenario():
        poll, task = wait_call(bob)
        await until(lambda: front.parked_calls() == 1, "bob's read parked")
        await asyncio.to_thread(send, hall["alice"], "lost?")
        await asyncio.wait_for(task, 10)
        return poll

    poll = asyncio.run(scenario())

    assert poll.status == 503
    assert poll.json()["error"]["code"] == "database_unavailable"
    assert read_seq(bob) == before
    assert [e["message"]["body"] for e in read_now(bob)["events"]] == ["lost?"]


def test_a_note_left_while_a_read_waits_rides_on_the_read_a_message_wakes(one_thread, hall):
    bob = hall["bob"]

    async def scenario():
        poll, task = wait_call(bob)
        await until(lambda: front.parked_calls() == 1, "bob's read parked")
        await asyncio.to_thread(note_leave, hall["alice"], to="bob", body="psst")
        await asyncio.to_thread(send, hall["alice"], "and the room")
        await asyncio.wait_for(task, 10)
        return poll

    poll = asyncio.run(scenario())

    assert [e["message"]["body"] for e in poll.json()["events"]] == ["and the room"]
    assert [n["body"] for n in poll.json()["notes"]] == ["psst"]


def test_without_the_front_a_read_writes_its_position_at_once(hall):
    """The test client, a plain WSGI server: nothing collects, the read writes itself."""
    bob = hall["bob"]
    sent = send(hall["alice"], "hello")
    assert groupcommit.defer(lambda items: None, 1) is False

    read = services.events_read(bob, "hall", wait=1)

    assert [e.seq for e in read.events] == [sent.message.seq]
    assert read_seq(bob) == sent.message.seq


def test_a_woken_read_runs_three_queries_and_defers_its_writes(one_thread, hall, monkeypatch):
    """Pinned: the woken run of a read that finds the message reads the session (and
    whether notes wait for it: none), the room with the membership, and the page;
    no look at its waiting tickets. Its position and its session's last_seen_at
    wait for the group commit."""
    runs: list[tuple[bool, list[str], int]] = []
    django = front._django

    def with_queries(request_scope, body, may_park, resumed, *labels):
        with CaptureQueriesContext(connection) as queries:
            outcome, writes = django(request_scope, body, may_park, resumed, *labels)
        runs.append((resumed is not None, [q["sql"] for q in queries], len(writes)))
        return outcome, writes

    monkeypatch.setattr(front, "_django", with_queries)

    bob = hall["bob"]
    quiet_since = timezone.now() - timedelta(minutes=1)

    async def scenario():
        poll, task = wait_call(bob)
        await until(lambda: front.parked_calls() == 1, "bob's read parked")
        # It waited longer than PLUMB_SEEN_WRITE_INTERVAL: its session is due a refresh.
        await asyncio.to_thread(Session.objects.filter(pk=bob.pk).update, last_seen_at=quiet_since)
        await asyncio.to_thread(send, hall["alice"], "count me")
        await asyncio.wait_for(task, 10)
        return poll

    poll = asyncio.run(scenario())

    assert [e["message"]["body"] for e in poll.json()["events"]] == ["count me"]
    assert Session.objects.get(pk=bob.pk).last_seen_at > quiet_since
    woken = [run for run in runs if run[0]]
    assert len(woken) == 1
    _, sql, deferred = woken[0]
    tables = [q for q in sql if not q.startswith(("SAVEPOINT", "RELEASE", "BEGIN", "COMMIT"))]
    assert not [q for q in tables if q.startswith("UPDATE")]
    assert deferred == 2  # its read position and its session's last_seen_at
    assert len(tables) == 3, tables


def test_a_woken_read_that_finds_its_message_answers_without_subscribing_again(
    one_thread, hall, monkeypatch
):
    subscribed: list[frozenset] = []
    subscribe = wakeups.wake.subscribe

    def counted(topics, **kwargs):
        subscription = subscribe(topics, **kwargs)
        subscribed.append(subscription.topics)
        return subscription

    monkeypatch.setattr(wakeups.wake, "subscribe", counted)

    async def scenario():
        poll, task = wait_call(hall["bob"])
        await until(lambda: front.parked_calls() == 1, "bob's read parked")
        await asyncio.to_thread(send, hall["alice"], "one look")
        await asyncio.wait_for(task, 10)
        return poll

    poll = asyncio.run(scenario())

    assert [e["message"]["body"] for e in poll.json()["events"]] == ["one look"]
    assert len(subscribed) == 1  # the parking run's; the woken run looked and answered
    assert wake.subscriptions() == 0


def test_a_message_committed_between_a_woken_reads_empty_look_and_its_subscription_wakes_it(
    one_thread, hall
):
    """Woken by an event its kinds leave out, bob's read looks (nothing), and is held
    before it subscribes again while alice's message commits: no subscription heard
    it, so the read must look again once subscribed, and answer with it."""
    bob = hall["bob"]
    dave = SessionFactory(workspace=bob.workspace, name="dave")

    with held_at("poll.looked") as held:

        async def scenario():
            poll, task = wait_call(bob, "/api/v1/rooms/hall/messages/?wait=20&kinds=message")
            await until(lambda: front.parked_calls() == 1, "bob's read parked")
            await asyncio.to_thread(services.room_join, dave, "hall")  # a join: not for bob
            await asyncio.to_thread(held.wait_reached)
            sent = await asyncio.to_thread(send, hall["alice"], "meanwhile")
            held.release()
            await asyncio.wait_for(task, 10)
            return poll, sent

        poll, sent = asyncio.run(scenario())

    assert poll.status == 200
    assert [e["message"]["body"] for e in poll.json()["events"]] == ["meanwhile"]
    assert poll.json()["read_seq"] == sent.message.seq == read_seq(bob)


def test_nothing_collects_in_a_thread_that_serves_no_request():
    done = threading.Event()
    got = []

    def other():
        got.append(groupcommit.defer(lambda items: None, 1))
        done.set()

    with groupcommit.collecting() as writes:
        threading.Thread(target=other).start()
        assert done.wait(5)
        assert groupcommit.defer(lambda items: None, 2) is True
    assert got == [False]
    assert [item for _, item in writes] == [2]
