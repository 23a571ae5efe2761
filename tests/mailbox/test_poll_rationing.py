"""Waiting polls are rationed (mailbox/wakeups.py).

A session has up to four waiting calls side by side (``WAITS_PER_SESSION``); one too
many makes the oldest answer at once with no notes. A process holds at most
``PLUMB_WAITING_POLLS`` waiting polls; past it a poll answers at once. Each
poll below asks to wait far longer than the test allows it (``LONG``), so a
poll that answers in time did so because it was superseded or refused a
place, never because its wait ran out. Polls run in threads, each on its own
database connection.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from common import wake
from mailbox import wakeups
from mailbox.models import Session
from mailbox.services import note_leave, notes_wait
from tests.factories import SessionFactory, WorkspaceFactory
from tests.races import first_sleep_of, held_at
from tests.waits import fill_but_one

LONG = 60.0  # what each poll asks to wait
PROMPT = 10.0  # how long the test waits for an answer that should come at once


class Poll(threading.Thread):
    def __init__(self, session: Session) -> None:
        super().__init__(daemon=True)
        self.session_id = session.pk
        self.notes: list | None = None
        self.answered = threading.Event()

    def run(self) -> None:
        try:
            session = Session.objects.select_related("name", "workspace").get(pk=self.session_id)
            self.notes = notes_wait(session, wait=LONG)
            self.answered.set()
        finally:
            connection.close()


def start_waiting(session: Session, *, places_taken: int) -> Poll:
    """A poll of ``session``, started and seen to hold its waiting place."""
    poll = Poll(session)
    with first_sleep_of(poll) as asleep:
        poll.start()
        # Until it sleeps in its place and any call it pushed out has left it.
        deadline = time.monotonic() + PROMPT
        while time.monotonic() < deadline and not poll.answered.is_set():
            if asleep.is_set() and wakeups.waiting_polls() == places_taken:
                break
            time.sleep(0.01)
    assert wakeups.waiting_polls() == places_taken
    return poll


@pytest.fixture
def mailbox(transactional_db):
    workspace = WorkspaceFactory(slug="main")
    return {
        "alice": SessionFactory(workspace=workspace, name="alice"),
        "bob": SessionFactory(workspace=workspace, name="bob"),
        "carol": SessionFactory(workspace=workspace, name="carol"),
    }


def test_a_poll_one_too_many_makes_the_oldest_answer_with_no_notes(mailbox):
    older = start_waiting(mailbox["alice"], places_taken=1)
    fill_but_one(mailbox["alice"])

    newer = Poll(mailbox["alice"])
    newer.start()

    assert older.answered.wait(PROMPT)
    assert older.notes == []
    assert not newer.answered.is_set()
    note_leave(mailbox["bob"], to="alice", body="for the newer poll")
    assert newer.answered.wait(PROMPT)
    assert [note.body for note in newer.notes] == ["for the newer poll"]
    newer.join(PROMPT)
    assert wakeups.waiting_polls() == 0


def test_a_poll_started_in_another_process_supersedes_through_its_wake_up(mailbox):
    older = start_waiting(mailbox["alice"], places_taken=1)

    # What a poll of the same session does first in another process: its
    # ticket, then its publication, which this process's listener delivers.
    Session.objects.filter(pk=mailbox["alice"].pk).update(poll_tickets="elsewhere/9999999999")
    wake.deliver([f"p:{mailbox['alice'].pk}"])

    assert older.answered.wait(PROMPT)
    assert older.notes == []
    older.join(PROMPT)
    assert wakeups.waiting_polls() == 0


def test_a_poll_is_not_woken_by_its_own_announcement(mailbox, monkeypatch):
    """On PostgreSQL a poll's publication comes back through its own process's listener."""
    published: list[str] = []
    publish = wake.publish
    monkeypatch.setattr(wake, "publish", lambda topics: published.extend(topics) or publish(topics))
    poll = start_waiting(mailbox["alice"], places_taken=1)
    (subscription,) = wake.topics._subscriptions[f"p:{mailbox['alice'].pk}"]

    wake.deliver(published)  # as this process's LISTEN connection delivers it

    assert not subscription.woken
    note_leave(mailbox["bob"], to="alice", body="still waiting")
    assert poll.answered.wait(PROMPT)
    assert [note.body for note in poll.notes] == ["still waiting"]
    poll.join(PROMPT)


def test_a_poll_one_too_many_recording_just_after_the_oldest_still_ends_it(mailbox):
    """The oldest poll is held right after recording its ticket, before it
    looks; the one too many records and announces meanwhile. The oldest must
    already be listening, or it would sleep its whole wait beside the others,
    and a note could go to the call nobody reads."""
    with held_at("poll.recorded") as held:
        older = Poll(mailbox["alice"])
        older.start()
        held.wait_reached()
        fill_but_one(mailbox["alice"])
        newer = Poll(mailbox["alice"])
        newer.start()
        deadline = time.monotonic() + PROMPT
        while wakeups.waiting_polls() < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert wakeups.waiting_polls() == 1  # the newer waits; the older is held
        held.release()
        assert older.answered.wait(PROMPT), "the older poll slept beside the newer one"
    assert older.notes == []
    note_leave(mailbox["bob"], to="alice", body="for the newer poll")
    assert newer.answered.wait(PROMPT)
    assert [note.body for note in newer.notes] == ["for the newer poll"]


def test_polls_of_other_sessions_are_not_superseded(mailbox):
    alice = start_waiting(mailbox["alice"], places_taken=1)
    bob = start_waiting(mailbox["bob"], places_taken=2)

    assert not alice.answered.is_set()
    note_leave(mailbox["carol"], to="alice", body="one")
    note_leave(mailbox["carol"], to="bob", body="two")
    assert alice.answered.wait(PROMPT)
    assert bob.answered.wait(PROMPT)
    assert [n.body for n in alice.notes] == ["one"]
    assert [n.body for n in bob.notes] == ["two"]


def test_past_the_processes_places_a_poll_answers_at_once(mailbox, settings):
    settings.PLUMB_WAITING_POLLS = 1
    alice = start_waiting(mailbox["alice"], places_taken=1)

    refused = Poll(mailbox["bob"])
    refused.start()

    assert refused.answered.wait(PROMPT)
    assert refused.notes == []
    assert not alice.answered.is_set()
    assert wakeups.waiting_polls() == 1
    note_leave(mailbox["carol"], to="alice", body="wake")
    assert alice.answered.wait(PROMPT)


def test_a_refused_poll_still_delivers_what_is_pending(mailbox, settings):
    settings.PLUMB_WAITING_POLLS = 1
    alice = start_waiting(mailbox["alice"], places_taken=1)
    note_leave(mailbox["carol"], to="bob", body="already here")

    refused = Poll(mailbox["bob"])
    refused.start()

    assert refused.answered.wait(PROMPT)
    assert [n.body for n in refused.notes] == ["already here"]
    note_leave(mailbox["carol"], to="alice", body="wake")
    assert alice.answered.wait(PROMPT)


# --- "next" notes wake only the sessions that can receive them (issue 23, item 9) ---------


@pytest.fixture
def wake_ups(monkeypatch) -> list[frozenset[str]]:
    """The topics of every subscription woken, one entry per wake-up (each costs a look)."""
    woken: list[frozenset[str]] = []
    wake_up = wake.Subscription.wake

    def counted(subscription: wake.Subscription) -> None:
        woken.append(subscription.topics)
        wake_up(subscription)

    monkeypatch.setattr(wake.Subscription, "wake", counted)
    return woken


def test_next_notes_wake_none_of_the_polls_waiting_in_their_workspace(mailbox, wake_ups):
    """Every waiting session started before the notes were sent: none can receive them
    (SPEC §3.4), so none is woken to look. Counted as each commit's own delivery,
    which is done when ``note_leave`` returns."""
    alice = start_waiting(mailbox["alice"], places_taken=1)
    bob = start_waiting(mailbox["bob"], places_taken=2)

    for n in range(5):
        note_leave(mailbox["carol"], to="next", body=f"hand-off {n}")

    assert wake_ups == []
    note_leave(mailbox["carol"], to="alice", body="named")
    note_leave(mailbox["carol"], to="bob", body="named")
    assert alice.answered.wait(PROMPT)
    assert bob.answered.wait(PROMPT)
    assert [n.body for n in alice.notes] == [n.body for n in bob.notes] == ["named"]


def test_a_next_note_still_wakes_a_waiting_session_that_can_receive_it(mailbox, wake_ups):
    """On PostgreSQL a note can commit after a session whose watermark (the highest
    note id committed when it started) is above the note's id: that note is the
    session's, and its wait must end."""
    Session.objects.filter(pk=mailbox["bob"].pk).update(notes_watermark=10**9)
    alice = start_waiting(mailbox["alice"], places_taken=1)
    bob = start_waiting(mailbox["bob"], places_taken=2)

    left = note_leave(mailbox["carol"], to="next", body="for bob's watermark")

    assert len(wake_ups) == 1  # bob's wait, not alice's
    assert bob.answered.wait(PROMPT)
    assert [n.public_id for n in bob.notes] == [left.note.public_id]
    assert not alice.answered.is_set()
    note_leave(mailbox["carol"], to="alice", body="named")
    assert alice.answered.wait(PROMPT)
