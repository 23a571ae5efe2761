"""Delivered or bounced, never both (SPEC §3.6), under races made to happen
(tests/races.py), on both databases.

Each test holds a claim or a bounce at its critical point while the other
runs on a second connection, then lets it go on, and checks that the note
ended in exactly one state, with a notice to its sender only if it bounced.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from mailbox import services
from mailbox.models import Note, Session
from tests.factories import AgentNameFactory, SessionFactory, WorkspaceFactory
from tests.races import race

pytestmark = pytest.mark.django_db(transaction=True)

LATER = timedelta(days=8)  # past the default note_ttl of 7 days


@pytest.fixture
def pair():
    """alice, and a note of hers waiting for bob, who is connected but has not called."""
    workspace = WorkspaceFactory(slug="races")
    alice = SessionFactory(workspace=workspace, name="alice")
    bob = SessionFactory(workspace=workspace, name="bob")
    note = services.note_leave(alice, body="for bob", to="bob").note
    return alice, bob, note


def claim(bob: Session) -> list[Note]:
    return services.notes_claim(Session.objects.get(pk=bob.pk))


def bounce() -> int:
    return services.notes_bounce(now=timezone.now() + LATER)


def assert_delivered_only(note: Note, bob: Session) -> None:
    note.refresh_from_db()
    assert (note.state, note.delivered_to_id) == ("delivered", bob.pk)
    assert note.bounced_at is None
    assert not Note.objects.filter(bounce_of__isnull=False).exists()


def assert_bounced_only(note: Note) -> None:
    note.refresh_from_db()
    assert note.state == "bounced"
    assert note.delivered_to_id is None
    assert Note.objects.filter(bounce_of=note.public_id).count() == 1


def test_a_claim_that_read_the_note_as_pending_gets_nothing_once_it_bounced(pair):
    _, bob, note = pair
    first, second, state = race("claim.candidates", lambda: claim(bob), bounce)

    # The bounce had nothing to wait for: the claim held no lock yet.
    assert state == "done"
    assert second.outcome() == 1
    assert first.outcome() == []
    assert_bounced_only(note)


def test_a_bounce_that_read_the_note_as_overdue_leaves_it_once_delivered(pair):
    _, bob, note = pair
    first, second, state = race("bounce.candidates", bounce, lambda: claim(bob))

    assert state == "done"
    assert [n.public_id for n in second.outcome()] == [note.public_id]
    assert first.outcome() == 0
    assert_delivered_only(note, bob)


def test_a_claim_waits_for_a_bounce_in_flight_and_then_finds_nothing(pair):
    _, bob, note = pair
    first, second, state = race("bounce.stored", bounce, lambda: claim(bob))

    # The claim's UPDATE waited for the bounce's row lock (PostgreSQL) or its
    # write lock (SQLite), then found the note no longer waiting.
    assert state == "blocked"
    assert first.outcome() == 1
    assert second.outcome() == []
    assert_bounced_only(note)


def test_a_bounce_leaves_a_note_a_claim_in_flight_is_delivering(pair):
    _, bob, note = pair

    def claim_in_a_transaction() -> list[Note]:
        with transaction.atomic():
            return claim(bob)

    first, second, state = race("claim.stamped", claim_in_a_transaction, bounce)

    # PostgreSQL skips the row the claim holds; SQLite waits for its write lock.
    assert state == ("done" if connection.vendor == "postgresql" else "blocked")
    assert [n.public_id for n in first.outcome()] == [note.public_id]
    assert second.outcome() == 0
    assert_delivered_only(note, bob)


def test_a_reply_racing_a_notice_for_the_next_position_takes_the_one_after(pair):
    _, bob, note = pair
    thread = note.conversation.public_id
    first, second, state = race(
        "bounce.threads_locked",
        bounce,
        lambda: services.note_leave(bob, conversation_id=thread, body="sorry, late"),
    )

    # The reply waited for the thread's row, locked by the bounce for the notice.
    assert state == "blocked"
    assert first.outcome() == 1
    reply = second.outcome()
    rows = list(
        Note.objects.filter(conversation=note.conversation)
        .order_by("position")
        .values_list("position", "sender_kind")
    )
    assert rows == [(1, "agent"), (2, "system"), (3, "agent")]
    assert reply.note.position == 3
    assert reply.exchanges_left == 18


def test_a_name_waiting_for_nobody_bounces_once_under_two_sweeps(pair):
    alice, _, _ = pair
    AgentNameFactory(handle="dave", workspace=alice.workspace)
    note = services.note_leave(alice, body="for dave", to="dave").note
    first, second, state = race("bounce.locked", bounce, bounce)

    total = first.outcome() + second.outcome()
    assert total == 2  # bob's note and dave's, each once
    assert Note.objects.filter(bounce_of=note.public_id).count() == 1
    assert state in ("blocked", "done")
