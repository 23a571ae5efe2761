"""Idempotency keys of ``leave_note``: a retry replays the original note, a changed
request is refused, and keys belong to the sender's name (SPEC §3.2).
"""

import pytest

from mailbox import services
from mailbox.models import Conversation, Note
from tests.mailbox.notes import (
    assert_refused,
    check,
    leave,
    note_row,
    session_from,
    start_session,
    stored,
)

pytestmark = pytest.mark.django_db


def test_a_retry_with_the_same_key_and_body_replays_the_original_note(alice, bob):
    first = leave(alice, body="deploy done", to="bob", idempotency_key="deploy-1")
    before = stored()

    retry = leave(alice, body="deploy done", to="bob", idempotency_key="deploy-1")

    assert retry.status_code == 200, retry.json()
    body = retry.json()
    assert body["replayed"] is True
    assert body["note"]["id"] == first.json()["note"]["id"]
    assert body["conversation_id"] == first.json()["conversation_id"]
    assert body["delivery"] == "session"
    assert body["exchanges_left"] == 19
    assert body["notes"] == []
    assert stored() == before
    assert len(check(bob).json()["notes"]) == 1


def test_a_retry_of_a_reply_with_the_same_key_replays_it(alice, bob):
    conversation_id = leave(alice, body="q", to="bob").json()["conversation_id"]
    first = leave(bob, body="a", conversation_id=conversation_id, idempotency_key="r1")

    retry = leave(bob, body="a", conversation_id=conversation_id, idempotency_key="r1")

    assert retry.status_code == 200
    assert retry.json()["replayed"] is True
    assert retry.json()["note"]["id"] == first.json()["note"]["id"]
    assert Conversation.objects.get(public_id=conversation_id).notes_count == 2


def test_an_idempotency_key_belongs_to_the_name_not_the_session(alice, bob, workspace):
    first = leave(alice, body="hello", to="bob", idempotency_key="k1")
    services.session_end(alice)
    alice_again = session_from(start_session(workspace, name="alice"))

    retry = leave(alice_again, body="hello", to="bob", idempotency_key="k1")

    assert retry.status_code == 200
    assert retry.json()["replayed"] is True
    assert retry.json()["note"]["id"] == first.json()["note"]["id"]
    assert Note.objects.count() == 1


def test_the_same_key_with_a_different_body_is_refused(alice, bob):
    first = leave(alice, body="version one", to="bob", idempotency_key="k1")
    before = stored()

    refused = leave(alice, body="version two", to="bob", idempotency_key="k1")

    assert_refused(refused, 409, "idempotency_key_reused")
    assert refused.json()["error"]["details"]["note_id"] == first.json()["note"]["id"]
    assert stored() == before
    assert note_row(first).body == "version one"


def test_the_same_key_with_a_different_recipient_is_refused(alice, bob, carol):
    leave(alice, body="hello", to="bob", idempotency_key="k1")
    before = stored()

    refused = leave(alice, body="hello", to="carol", idempotency_key="k1")

    assert_refused(refused, 409, "idempotency_key_reused")
    assert stored() == before
    assert check(carol).json()["notes"] == []


def test_the_same_key_naming_next_after_a_named_recipient_is_refused(alice, bob):
    leave(alice, body="hello", to="bob", idempotency_key="k1")
    before = stored()

    refused = leave(alice, body="hello", to="next", idempotency_key="k1")

    assert_refused(refused, 409, "idempotency_key_reused")
    assert stored() == before


def test_the_same_key_on_a_new_thread_without_to_after_a_named_recipient_is_refused(alice, bob):
    # Omitting `to` on a new thread means "next" (SPEC §3.2), a different
    # recipient from bob, so this is not a retry of the first request.
    leave(alice, body="hello", to="bob", idempotency_key="k1")
    before = stored()

    refused = leave(alice, body="hello", idempotency_key="k1")

    assert_refused(refused, 409, "idempotency_key_reused")
    assert stored() == before


def test_the_same_key_in_a_different_conversation_is_refused(alice, bob):
    first_thread = leave(alice, body="a", to="bob").json()["conversation_id"]
    second_thread = leave(alice, body="b", to="bob").json()["conversation_id"]
    leave(alice, body="same", conversation_id=first_thread, idempotency_key="k1")
    before = stored()

    refused = leave(alice, body="same", conversation_id=second_thread, idempotency_key="k1")

    assert_refused(refused, 409, "idempotency_key_reused")
    assert stored() == before


def test_idempotency_keys_are_per_sender_name(alice, bob, carol):
    mine = leave(alice, body="hello", to="carol", idempotency_key="shared")

    theirs = leave(bob, body="hello", to="carol", idempotency_key="shared")

    assert theirs.status_code == 201, theirs.json()
    assert theirs.json()["replayed"] is False
    assert theirs.json()["note"]["id"] != mine.json()["note"]["id"]
    assert Note.objects.filter(idempotency_key="shared").count() == 2
