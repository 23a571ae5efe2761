"""``GET /api/v1/conversations/<id>/`` (read_conversation): one thread with all its notes,
for participants only, changing no delivery state (SPEC §3.3).
"""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from mailbox.models import Note
from tests.mailbox.notes import NOTE_FIELDS, assert_refused, check, history, ids, leave

pytestmark = pytest.mark.django_db


def test_a_thread_shows_all_its_notes_in_order_to_its_participants(alice, bob):
    conversation_id = leave(alice, body="one", to="bob").json()["conversation_id"]
    leave(bob, body="two", conversation_id=conversation_id)
    leave(alice, body="three", conversation_id=conversation_id)

    response = history(bob, conversation_id)

    assert response.status_code == 200
    thread = response.json()["conversation"]
    assert thread["id"] == conversation_id
    assert [n["position"] for n in thread["notes"]] == [1, 2, 3]
    assert [n["body"] for n in thread["notes"]] == ["one", "two", "three"]
    assert [n["from"]["name"] for n in thread["notes"]] == ["alice", "bob", "alice"]
    assert [n["to"] for n in thread["notes"]] == ["bob", "alice", "bob"]
    assert all(set(n) >= NOTE_FIELDS for n in thread["notes"])
    assert all(n["conversation_id"] == conversation_id for n in thread["notes"])
    assert thread["cap"] == 20
    assert thread["notes_count"] == 3
    assert thread["exchanges_left"] == 17
    assert {p["name"] for p in thread["participants"]} == {"alice", "bob"}


def test_a_thread_is_refused_to_a_session_that_is_not_a_participant(alice, bob, carol):
    conversation_id = leave(alice, body="private", to="bob").json()["conversation_id"]

    response = history(carol, conversation_id)

    assert_refused(response, 403, "not_a_participant")
    assert "private" not in response.content.decode()


def test_an_unknown_thread_is_not_found(alice):
    assert_refused(history(alice, "cnv_doesnotexist"), 404, "conversation_not_found")


def test_reading_a_thread_does_not_deliver_notes_pending_for_someone_else(alice, bob, carol):
    conversation_id = leave(alice, body="hello bob", to="bob").json()["conversation_id"]
    leave(alice, body="hello carol", to="carol", conversation_id=conversation_id)

    for reader in (alice, carol):
        response = history(reader, conversation_id)
        assert response.status_code == 200
        assert "hello bob" in [n["body"] for n in response.json()["conversation"]["notes"]]

    pending_for_bob = Note.objects.get(body="hello bob")
    assert pending_for_bob.delivered_at is None
    assert ids(check(bob).json()["notes"]) == [pending_for_bob.public_id]


def test_reading_a_thread_delivers_the_readers_own_pending_notes_only_through_the_envelope(
    alice, bob
):
    # SPEC §2/§3.4: every successful call delivers, so the history call's
    # top-level `notes` carries the note once; the history itself marks nothing.
    conversation_id = leave(alice, body="hello bob", to="bob").json()["conversation_id"]
    note = Note.objects.get()

    first = history(bob, conversation_id)
    second = history(bob, conversation_id)

    assert ids(first.json()["notes"]) == [note.public_id]
    assert second.json()["notes"] == []
    assert [n["id"] for n in second.json()["conversation"]["notes"]] == [note.public_id]
    note.refresh_from_db()
    assert note.delivered_to == bob
    assert check(bob).json()["notes"] == []


def test_a_delivered_note_stays_in_the_thread_history(alice, bob):
    response = leave(alice, body="read me again", to="bob")
    check(bob)

    thread = history(bob, response.json()["conversation_id"]).json()["conversation"]

    assert [n["id"] for n in thread["notes"]] == [response.json()["note"]["id"]]
    assert thread["notes"][0]["body"] == "read me again"


def test_the_thread_history_runs_a_fixed_number_of_queries(alice, bob, carol):
    conversation_id = leave(alice, body="one", to="bob").json()["conversation_id"]
    check(bob)
    with CaptureQueriesContext(connection) as one:
        assert len(history(alice, conversation_id).json()["conversation"]["notes"]) == 1
    for i in range(4):
        leave(alice, body=f"more {i}", to="carol", conversation_id=conversation_id)
    check(carol)
    with CaptureQueriesContext(connection) as five:
        assert len(history(alice, conversation_id).json()["conversation"]["notes"]) == 5

    assert len(five) == len(one)
