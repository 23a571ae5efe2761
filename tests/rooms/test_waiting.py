"""Waiting for rooms and for anything (issue 16, item 1; SPEC §3.3, §4.3).

``read_messages`` with ``wait`` and ``wait_for_activity`` follow the one waiting
rule of ``mailbox/wakeups.py`` that ``check_messages`` follows: woken by the
commit of what it waits for, from this process or (through the process's
listener) another, one waiting call per session whichever kind, a bounded
number per process. Waiting calls run in threads, each on its own database connection,
and ask to wait far longer than the test allows them (``LONG``), so a call that
answers in time did so for the reason the test names.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from common import wake
from mailbox import wakeups
from mailbox.models import Note, Session
from mailbox.services import note_leave, notes_wait
from mailbox.wakeups import WAITS_PER_SESSION
from rooms import services
from rooms.errors import NotAMember, RoomNotFound
from rooms.models import Member, Room
from rooms.selectors import member_get_for_operator
from rooms.services.stream import ROOM_PREFIX, room_topic
from tests.factories import SessionFactory, WorkspaceFactory
from tests.hostwake import busy_listener, host_listener, other_process
from tests.races import first_sleep_of, held_at
from tests.waits import fill_but_one, wait_elsewhere

LONG = 60.0  # what each waiting call asks to wait
PROMPT = 10.0  # how long the test waits for an answer that should come at once
QUIET = 1.0  # how long the test watches a call that should go on waiting


class Waiter(threading.Thread):
    """One waiting call of a session, in a thread of its own."""

    def __init__(self, session: Session, call: Callable[[Session], Any]) -> None:
        super().__init__(daemon=True)
        self.session_id = session.pk
        self.call = call
        self.answer: Any = None
        self.error: Exception | None = None
        self.answered = threading.Event()

    def run(self) -> None:
        try:
            session = Session.objects.select_related("name", "workspace").get(pk=self.session_id)
            self.answer = self.call(session)
        except Exception as exc:  # handed to the test, which asserts on it
            self.error = exc
        finally:
            self.answered.set()
            connection.close()

    def result(self) -> Any:
        assert self.answered.wait(PROMPT), "the call did not answer"
        self.join(PROMPT)
        if self.error is not None:
            raise self.error
        return self.answer


def start(session: Session, call: Callable[[Session], Any], *, places_taken: int = 1) -> Waiter:
    """A waiting call of ``session``, started and seen to hold its waiting place."""
    waiter = Waiter(session, call)
    with first_sleep_of(waiter) as asleep:
        waiter.start()
        # Until it sleeps in its place and any call it pushed out has left it.
        deadline = time.monotonic() + PROMPT
        while time.monotonic() < deadline and not waiter.answered.is_set():
            if asleep.is_set() and wakeups.waiting_polls() == places_taken:
                break
            time.sleep(0.01)
    assert wakeups.waiting_polls() == places_taken, waiter.error or waiter.answer
    return waiter


def read_waiting(slug: str = "general", **options: Any) -> Callable[[Session], Any]:
    return lambda session: services.events_read(session, slug, wait=LONG, **options)


def activity_waiting(session: Session) -> services.Activity:
    return services.activity_wait(session, wait=LONG)


def notes_waiting(session: Session) -> list[Note]:
    return notes_wait(session, wait=LONG)


def bodies(read) -> list[str]:
    return [event.message.body for event in read.events if event.message_id is not None]


def read_seq(session: Session, slug: str = "general") -> int:
    return Member.objects.get(room__slug=slug, name=session.name).read_seq


@pytest.fixture
def agents(transactional_db) -> dict[str, Session]:
    """bob creates ``general`` (seq 1), alice joins (seq 2); carol is not a member."""
    workspace = WorkspaceFactory(slug="main")
    agents = {
        name: SessionFactory(workspace=workspace, name=name) for name in ("alice", "bob", "carol")
    }
    services.room_create(agents["bob"], slug="general")
    services.room_join(agents["alice"], "general")
    return agents


# --- read_messages with wait -------------------------------------------------------------


def test_a_room_wait_answers_at_once_when_an_event_is_above_the_read_position(agents):
    alice, bob = agents["alice"], agents["bob"]
    services.message_send(bob, "general", body="already here")

    waiter = Waiter(alice, read_waiting())
    waiter.start()
    read = waiter.result()

    assert bodies(read) == ["already here"]
    assert read.read_seq == read.latest_seq == 3
    assert read_seq(alice) == 3
    assert wakeups.waiting_polls() == 0


def test_the_reference_is_after_seq_when_one_is_given(agents):
    alice = agents["alice"]

    waiter = Waiter(alice, read_waiting(after_seq=0))
    waiter.start()
    read = waiter.result()

    assert [event.seq for event in read.events] == [1, 2]


def test_a_room_wait_is_woken_at_once_by_a_send_in_this_process(agents):
    alice, bob = agents["alice"], agents["bob"]
    waiter = start(alice, read_waiting())

    sent = services.message_send(bob, "general", body="wake up")

    read = waiter.result()
    assert bodies(read) == ["wake up"]
    assert read.events[0].message.public_id == sent.message.public_id
    assert read_seq(alice) == sent.message.seq
    assert wakeups.waiting_polls() == 0


def test_a_room_event_committed_elsewhere_wakes_the_wait_through_the_listener(agents, monkeypatch):
    alice, bob = agents["alice"], agents["bob"]
    waiter = start(alice, read_waiting())
    # As if another process committed it: nobody here is woken by the commit...
    with monkeypatch.context() as patched:
        patched.setattr(wake, "publish", lambda topics, **kwargs: None)
        services.message_send(bob, "general", body="from afar")
    assert not waiter.answered.wait(QUIET)

    # ...but by its publication, as this process's listener delivers it.
    wake.deliver([f"r:{Room.objects.get(slug='general').pk}"])

    assert waiter.answered.wait(PROMPT)
    assert bodies(waiter.result()) == ["from afar"]


def test_a_room_wait_times_out_with_an_empty_read(agents):
    alice = agents["alice"]

    started = time.monotonic()
    read = services.events_read(alice, "general", wait=0.3)

    assert time.monotonic() - started >= 0.3
    assert read.events == []
    assert (read.read_seq, read.latest_seq, read.has_more) == (2, 2, False)
    assert read_seq(alice) == 2
    assert wakeups.waiting_polls() == 0


def test_an_event_of_a_kind_left_out_does_not_end_the_wait(agents):
    alice, bob, carol = agents["alice"], agents["bob"], agents["carol"]
    waiter = start(alice, read_waiting(kinds=["message"]))

    services.room_join(carol, "general")  # seq 3, a join: the read would return nothing

    assert not waiter.answered.wait(QUIET)
    services.message_send(bob, "general", body="a message")  # seq 4
    read = waiter.result()
    assert [(event.seq, event.kind) for event in read.events] == [(4, "message")]
    assert read_seq(alice) == 4  # a join left out holds no read position back


def test_a_member_removed_while_waiting_is_told_it_is_no_member(agents):
    alice = agents["alice"]
    waiter = start(alice, read_waiting())

    room = Room.objects.get(slug="general")
    services.member_remove(member_get_for_operator(room, "alice"), actor="op", reason="test")

    assert waiter.answered.wait(PROMPT)
    assert isinstance(waiter.error, NotAMember)


@pytest.mark.parametrize(
    ("slug", "error"), [("general", NotAMember), ("nowhere", RoomNotFound)], ids=["member", "room"]
)
def test_a_refused_room_wait_answers_at_once_and_supersedes_nothing(agents, slug, error):
    carol = agents["carol"]
    older = start(carol, notes_waiting)

    with pytest.raises(error):
        services.events_read(carol, slug, wait=LONG)

    assert not older.answered.wait(QUIET)
    note_leave(agents["bob"], to="carol", body="still listening")
    assert [note.body for note in older.result()] == ["still listening"]


# --- a send in another process of this host (SQLite's datagrams) -------------------------
#
# A room's topic is sparse (rooms/services/stream.py): a send reaches only the
# processes of the host that announce they hold a call waiting on a room. The
# other process is a subprocess publishing as a send's commit does, the send
# itself committed here with no publication (tests/hostwake.py).


def sent_unpublished(session: Session, body: str, monkeypatch) -> None:
    with monkeypatch.context() as patched:
        patched.setattr(wake, "publish", lambda topics, **kwargs: None)
        services.message_send(session, "general", body=body)


def general_topic() -> str:
    return room_topic(Room.objects.get(slug="general").pk)


def test_a_room_wait_asleep_is_woken_by_a_send_in_another_process(
    agents, tmp_path, settings, monkeypatch
):
    settings.VAR_DIR = tmp_path
    alice, bob = agents["alice"], agents["bob"]

    with host_listener():
        waiter = start(alice, read_waiting())
        sent_unpublished(bob, "from afar", monkeypatch)
        assert not waiter.answered.wait(QUIET)  # nothing here published it
        sender = other_process(tmp_path, [general_topic()])
        assert sender.communicate(timeout=60) == ("sent\n", None)
        assert waiter.answered.wait(PROMPT)

    assert bodies(waiter.result()) == ["from afar"]


def test_a_room_wait_between_its_look_and_its_sleep_is_woken_by_a_send_scanned_then(
    agents, tmp_path, settings, monkeypatch
):
    """The other process lists the listeners after this call's look found
    nothing and before it sleeps: the call announced its wait before that look,
    so the scan finds it and the datagram wakes it."""
    settings.VAR_DIR = tmp_path
    alice, bob = agents["alice"], agents["bob"]

    with host_listener(), held_at("poll.asleep") as looked:
        waiter = Waiter(alice, read_waiting())
        waiter.start()
        looked.wait_reached()
        sent_unpublished(bob, "between", monkeypatch)
        sender = other_process(tmp_path, [general_topic()])
        assert sender.communicate(timeout=60) == ("sent\n", None)
        looked.release()
        assert waiter.answered.wait(PROMPT)

    assert bodies(waiter.result()) == ["between"]


def test_a_send_reaches_only_the_processes_of_the_host_that_wait_on_a_room(
    agents, tmp_path, settings
):
    """A process holding no room's waiting call is not woken by every send."""
    settings.VAR_DIR = tmp_path
    # Another process's socket, read only by the test; its announcement file says
    # whether it waits on a room (as that process's subscriptions would write it).
    listener = busy_listener(wake.wake_dir())
    announced = Path(f"{listener.getsockname()}~{ROOM_PREFIX}")
    topic, name = general_topic(), f"n:{agents['alice'].name_id}"
    try:
        for room_waiter in (False, True, False):
            if room_waiter:
                announced.touch()
            else:
                announced.unlink(missing_ok=True)
            # Each send's publication, with a note's topic that goes everywhere.
            wake.host.send([topic, name])
        datagrams = [sorted(listener.recv(65536).decode().split(" ")) for _ in range(3)]
    finally:
        listener.close()

    assert datagrams == [[name], sorted([topic, name]), [name]]


# --- wait_for_activity ---------------------------------------------------------------------


def test_activity_delivers_a_pending_note_at_once(agents):
    alice, bob = agents["alice"], agents["bob"]
    left = note_leave(bob, to="alice", body="for you")

    waiter = Waiter(alice, activity_waiting)
    waiter.start()
    activity = waiter.result()

    assert [note.public_id for note in activity.notes] == [left.note.public_id]
    assert activity.rooms == []
    assert Note.objects.get(pk=left.note.pk).delivered_to_id == alice.pk
    assert notes_wait(alice, wait=0) == []  # delivered once


def test_activity_lists_a_room_with_messages_from_others_without_reading_it(agents):
    alice, bob = agents["alice"], agents["bob"]
    services.message_send(bob, "general", body="one")
    services.message_send(bob, "general", body="two")

    waiter = Waiter(alice, activity_waiting)
    waiter.start()
    activity = waiter.result()

    assert activity.notes == []
    assert [(m.room.slug, m.room.head_seq, m.read_seq, m.unseen) for m in activity.rooms] == [
        ("general", 4, 2, 2)
    ]
    assert read_seq(alice) == 2  # listed, not read


def test_a_review_lists_a_room_but_unseen_counts_messages_as_list_rooms_does(agents):
    alice, bob = agents["alice"], agents["bob"]
    mine = services.message_send(alice, "general", body="please review").message
    assert read_seq(alice) == 3

    services.review_add(bob, "general", mine.public_id, verdict="approve")

    (member,) = services.activity_wait(alice).rooms
    assert (member.room.slug, member.read_seq, member.unseen) == ("general", 3, 0)


def test_activity_ignores_own_events_and_joins_and_times_out_empty(agents):
    alice, carol = agents["alice"], agents["carol"]
    services.message_send(alice, "general", body="mine")
    services.room_join(carol, "general")  # another's event, but a join
    Member.objects.filter(name=alice.name).update(read_seq=0)  # everything above it

    started = time.monotonic()
    activity = services.activity_wait(alice, wait=0.3)

    assert time.monotonic() - started >= 0.3
    assert (activity.notes, activity.rooms) == ([], [])
    assert wakeups.waiting_polls() == 0


def test_activity_without_wait_answers_with_the_current_state(agents):
    alice, bob = agents["alice"], agents["bob"]

    assert services.activity_wait(alice).rooms == []
    services.message_send(bob, "general", body="news")
    assert [m.room.slug for m in services.activity_wait(alice, wait=0).rooms] == ["general"]


def test_activity_leaves_out_rooms_one_has_left(agents):
    alice, bob = agents["alice"], agents["bob"]
    services.message_send(bob, "general", body="news")
    services.room_leave(alice, "general")

    assert services.activity_wait(alice).rooms == []


@pytest.mark.parametrize("news", ["note", "room message"])
def test_activity_is_woken_at_once_by_a_note_or_a_room_message(agents, news):
    alice, bob = agents["alice"], agents["bob"]
    waiter = start(alice, activity_waiting)

    if news == "note":
        note_leave(bob, to="alice", body="psst")
    else:
        services.message_send(bob, "general", body="news")

    activity = waiter.result()
    if news == "note":
        assert ([n.body for n in activity.notes], activity.rooms) == (["psst"], [])
    else:
        assert activity.notes == []
        assert [(m.room.slug, m.unseen) for m in activity.rooms] == [("general", 1)]


def test_activity_is_not_ended_by_ones_own_send(agents):
    alice, bob = agents["alice"], agents["bob"]
    waiter = start(alice, activity_waiting)

    services.message_send(alice, "general", body="talking to myself")

    assert not waiter.answered.wait(QUIET)
    services.message_send(bob, "general", body="an answer")
    assert [m.unseen for m in waiter.result().rooms] == [1]


# --- four waiting calls per session, a bounded number per process ---------------------------

KINDS = {
    "notes": (notes_waiting, lambda answer: answer == []),
    "room": (read_waiting(), lambda answer: answer.events == [] and answer.read_seq == 2),
    "activity": (activity_waiting, lambda answer: (answer.notes, answer.rooms) == ([], [])),
}


@pytest.mark.parametrize("newer", KINDS)
@pytest.mark.parametrize("older", KINDS)
def test_a_waiting_call_of_any_kind_one_too_many_makes_the_oldest_answer_at_once(
    agents, older, newer
):
    alice = agents["alice"]
    older_call, answered_with_nothing = KINDS[older]
    first = start(alice, older_call)
    fill_but_one(alice)

    second = start(alice, KINDS[newer][0])

    assert answered_with_nothing(first.result())
    assert not second.answered.is_set()
    # Ended the way a newer call in another process would end it.
    Session.objects.filter(pk=alice.pk).update(poll_tickets="elsewhere/9999999999")
    wake.deliver([f"p:{alice.pk}"])
    assert second.answered.wait(PROMPT)
    assert wakeups.waiting_polls() == 0


def test_up_to_four_waiting_calls_of_a_session_wait_side_by_side(agents):
    alice, bob = agents["alice"], agents["bob"]
    calls = [
        start(alice, call, places_taken=n)
        for n, call in enumerate(
            [notes_waiting, read_waiting(), activity_waiting, notes_waiting], start=1
        )
    ]
    assert not any(call.answered.wait(QUIET) for call in calls)

    note_leave(bob, to="alice", body="for one of them")

    # The two note waits and the activity wait are woken: one takes the note,
    # the others find nothing and wait on.
    deadline = time.monotonic() + PROMPT
    while not any(calls[i].answered.is_set() for i in (0, 2, 3)):
        assert time.monotonic() < deadline, "no call took the note"
        time.sleep(0.01)
    assert not any(c.answered.wait(QUIET) for c in calls if not c.answered.is_set())
    taker = next(c for c in calls if c.answered.is_set())
    answer = taker.result()
    assert [n.body for n in (answer if isinstance(answer, list) else answer.notes)] == [
        "for one of them"
    ]
    services.message_send(bob, "general", body="news")
    assert bodies(calls[1].result()) == ["news"]
    # The rest end as calls pushed out by four newer ones elsewhere do.
    wait_elsewhere(alice, WAITS_PER_SESSION)
    wake.deliver([f"p:{alice.pk}"])
    for call in calls:
        call.result()
    assert wakeups.waiting_polls() == 0


def test_a_room_wait_superseded_by_an_activity_wait_leaves_it_the_news(agents):
    alice, bob = agents["alice"], agents["bob"]
    room_wait = start(alice, read_waiting())
    fill_but_one(alice)

    activity = start(alice, activity_waiting)

    assert room_wait.result().events == []
    services.message_send(bob, "general", body="for the newer call")
    assert [(m.room.slug, m.unseen) for m in activity.result().rooms] == [("general", 1)]
    assert read_seq(alice) == 2


def test_the_process_bound_counts_every_kind_of_waiting_call(agents, settings):
    settings.PLUMB_WAITING_POLLS = 1
    alice, bob, carol = agents["alice"], agents["bob"], agents["carol"]
    services.message_send(alice, "general", body="news for bob")  # read, being her own
    room_wait = start(alice, read_waiting())

    refused = Waiter(bob, activity_waiting)
    refused.start()

    # No place left: bob's call answers at once with what there is.
    assert [(m.room.slug, m.unseen) for m in refused.result().rooms] == [("general", 1)]
    also_refused = Waiter(carol, notes_waiting)
    also_refused.start()
    assert also_refused.result() == []
    assert wakeups.waiting_polls() == 1
    assert not room_wait.answered.is_set()
    services.message_send(bob, "general", body="for alice")
    assert bodies(room_wait.result()) == ["for alice"]
