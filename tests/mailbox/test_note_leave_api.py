"""``POST /api/v1/notes/`` (leave_note) for a new thread: the reply, recipients, the
body and its limits, secret scrubbing, and the statements a send takes (SPEC §3.2, §3.5).

Replies, the project rules, idempotency and delivery have files of their own
(``test_note_*.py``); together they cover every sentence of reference/leave_note.txt.
Every refusal is checked for its status, its code, that nothing was stored and that the
idempotency key it carried was not used up.
"""

import re

import pytest
from django.db import connection

from common import limits
from mailbox.models import Conversation, Note, Participant
from tests.conftest import client_for
from tests.factories import SessionFactory, WorkspaceFactory
from tests.mailbox.notes import (
    NOTE_FIELDS,
    assert_refused,
    check,
    history,
    ids,
    leave,
    note_row,
    participant_names,
    stored,
)

pytestmark = pytest.mark.django_db

GITHUB_TOKEN = "ghp_" + "a1B2c3D4e5" * 4


# --- a new thread --------------------------------------------------------------------


def test_a_new_thread_defaults_to_next_and_the_reply_describes_the_note(alice, project):
    response = leave(alice, body="The build is green; deploy when ready.")

    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["delivery"] == "next"
    assert body["replayed"] is False
    assert body["scrubbed"] == []
    assert body["notes"] == []
    assert body["exchanges_left"] == project.max_exchanges - 1 == 19
    note = body["note"]
    assert set(note) >= NOTE_FIELDS
    assert note["id"].startswith("note_")
    assert note["conversation_id"] == body["conversation_id"]
    assert note["from"] == {
        "name": "alice",
        "workspace": "main",
        "project": project.slug,
        "kind": "agent",
    }
    assert note["to"] == "next"
    assert note["body"] == "The build is green; deploy when ready."
    assert note["created_at"].endswith("Z")
    assert note["position"] == 1
    assert note["exchanges_left"] == 19
    conversation = Conversation.objects.get(public_id=body["conversation_id"])
    assert conversation.cap == 20
    assert conversation.notes_count == 1
    row = note_row(response)
    assert row.conversation == conversation
    assert row.next_workspace == alice.workspace
    assert row.recipient is None
    assert row.delivery == "next"
    assert row.delivered_at is None
    assert participant_names(body["conversation_id"]) == {"alice"}


def test_next_named_explicitly_is_the_same_as_omitting_to(alice):
    response = leave(alice, body="hello", to="next")

    assert response.status_code == 201
    assert response.json()["delivery"] == "next"
    assert response.json()["note"]["to"] == "next"
    assert note_row(response).next_workspace == alice.workspace


def test_each_new_thread_gets_its_own_conversation_id(alice):
    first = leave(alice, body="one").json()["conversation_id"]
    second = leave(alice, body="two").json()["conversation_id"]

    assert first != second
    assert Conversation.objects.count() == 2


# --- recipients and bodies -----------------------------------------------------------------


def test_a_note_to_a_name_in_another_workspace_of_the_same_project_needs_no_opt_in(alice, project):
    dave = SessionFactory(workspace=WorkspaceFactory(project=project, slug="other"), name="dave")

    response = leave(alice, body="hello from main", to="dave")

    assert response.status_code == 201, response.json()
    assert response.json()["delivery"] == "session"
    assert ids(check(dave).json()["notes"]) == [response.json()["note"]["id"]]


def test_a_note_to_an_unknown_name_is_refused(alice, workspace):
    before = stored()

    refused = leave(alice, body="hello", to="bob", idempotency_key="k1")

    assert_refused(refused, 404, "recipient_not_found")
    assert stored() == before
    SessionFactory(workspace=workspace, name="bob")
    assert leave(alice, body="hello", to="bob", idempotency_key="k1").status_code == 201


def test_a_body_over_16384_utf8_bytes_is_refused_though_it_has_fewer_characters(alice, bob):
    body = "é" * 8192 + "a"  # 8193 characters, 16385 bytes of UTF-8
    assert len(body) < 16384 < len(body.encode("utf-8"))
    before = stored()

    refused = leave(alice, body=body, to="bob", idempotency_key="k1")

    assert_refused(refused, 413, "body_too_large")
    assert stored() == before
    assert leave(alice, body=body[:-1], to="bob", idempotency_key="k1").status_code == 201


# A short password glued to "-p" after mysql becomes "-p[REDACTED:password_assignment]":
# each 11-byte line grows to 39 bytes once scrubbed (SPEC §3.2: the limit holds for
# what is stored).
GROWING_LINE = "mysql -px9\n"
SCRUBBED_LINE = "mysql -p[REDACTED:password_assignment]\n"


def test_a_body_that_scrubbing_grows_past_the_limit_is_refused_with_stored_bytes(alice, bob):
    body = GROWING_LINE * 500  # 5,500 bytes sent, 19,500 once scrubbed
    assert len(body.encode("utf-8")) <= limits.BODY_MAX_BYTES
    before = stored()

    refused = leave(alice, body=body, to="bob", idempotency_key="k1")

    assert_refused(refused, 413, "body_too_large")
    assert refused.json()["error"]["details"]["stored_bytes"] == len(SCRUBBED_LINE) * 500
    assert stored() == before
    assert leave(alice, body="hello", to="bob", idempotency_key="k1").status_code == 201


@pytest.mark.parametrize(("tail", "accepted"), [("abcd", True), ("abcde", False)])
def test_the_stored_limit_is_16384_bytes_of_the_scrubbed_body(alice, bob, tail, accepted):
    body = GROWING_LINE * 420 + tail  # scrubbed: 16,380 bytes plus the tail
    before = stored()

    response = leave(alice, body=body, to="bob")

    if accepted:
        assert response.status_code == 201, response.json()
        assert note_row(response).body == SCRUBBED_LINE * 420 + tail
        assert len(note_row(response).body.encode("utf-8")) == limits.BODY_MAX_BYTES
    else:
        assert_refused(response, 413, "body_too_large")
        assert response.json()["error"]["details"]["stored_bytes"] == limits.BODY_MAX_BYTES + 1
        assert stored() == before


@pytest.mark.parametrize(
    "body",
    ["é" * 8192, "€" * 5461 + "a", "a" * 16384],
    ids=["two-byte", "three-byte", "ascii"],
)
def test_a_body_of_exactly_16384_utf8_bytes_is_accepted_whole(alice, bob, body):
    assert len(body.encode("utf-8")) == 16384

    response = leave(alice, body=body, to="bob")

    assert response.status_code == 201, response.json()["error"]
    assert note_row(response).body == body
    assert check(bob).json()["notes"][0]["body"] == body


def test_a_one_byte_body_is_accepted(alice, bob):
    response = leave(alice, body="k", to="bob")

    assert response.status_code == 201
    assert note_row(response).body == "k"


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"body": ""}, "body"),
        ({"body": "before\x00after"}, "body"),
        ({"body": 42}, "body"),
        ({"body": ["a list"]}, "body"),
        ({"body": None}, "body"),
        ({}, "body"),
        ({"body": "hello", "to": 42}, "to"),
        ({"body": "hello", "to": ["bob"]}, "to"),
        ({"body": "hello", "to": ""}, "to"),
        ({"body": "hello", "conversation_id": 7}, "conversation_id"),
    ],
    ids=[
        "empty-body",
        "nul-in-body",
        "number-body",
        "list-body",
        "null-body",
        "missing-body",
        "number-to",
        "list-to",
        "empty-to",
        "number-conversation-id",
    ],
)
def test_a_malformed_note_is_a_validation_error_and_leaves_its_key_unused(
    alice, bob, payload, field
):
    before = stored()

    refused = leave(alice, **payload, idempotency_key="k1")

    assert_refused(refused, 400, "validation_error")
    assert field in refused.json()["error"]["details"]
    assert stored() == before
    assert leave(alice, body="hello", to="bob", idempotency_key="k1").status_code == 201


@pytest.mark.parametrize(
    "key",
    ["k" * 129, "", "tab\there", "new\nline", "bell\x07", "café", 42],
    ids=["too-long", "empty", "tab", "newline", "control", "non-ascii", "number"],
)
def test_a_malformed_idempotency_key_is_a_validation_error(alice, bob, key):
    before = stored()

    refused = leave(alice, body="hello", to="bob", idempotency_key=key)

    assert_refused(refused, 400, "validation_error")
    assert "idempotency_key" in refused.json()["error"]["details"]
    assert stored() == before


def test_an_idempotency_key_of_128_printable_characters_is_accepted(alice, bob):
    key = ("printable ~!" * 11)[:128]

    response = leave(alice, body="hello", to="bob", idempotency_key=key)

    assert response.status_code == 201
    assert note_row(response).idempotency_key == key


# --- secret scrubbing ------------------------------------------------------------------------


def test_a_github_token_is_scrubbed_before_storage_and_everywhere_it_is_shown(alice, bob):
    original = f"Use {GITHUB_TOKEN} to push, then ping me."
    redacted = "Use [REDACTED:github_token] to push, then ping me."

    response = leave(alice, body=original, to="bob")

    assert response.status_code == 201
    assert response.json()["scrubbed"] == [{"kind": "github_token", "count": 1}]
    assert response.json()["note"]["body"] == redacted
    assert note_row(response).body == redacted
    assert not Note.objects.filter(body__contains=GITHUB_TOKEN).exists()
    delivered = check(bob)
    assert delivered.json()["notes"][0]["body"] == redacted
    thread = history(alice, response.json()["conversation_id"])
    assert thread.json()["conversation"]["notes"][0]["body"] == redacted
    for reply in (response, delivered, thread):
        assert GITHUB_TOKEN not in reply.content.decode()


def test_ordinary_prose_and_hashes_are_stored_untouched(alice, bob):
    body = "Fixed in 3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a3f; see id 0b6f3c1e-5d2a-4c8e-9f1b."

    response = leave(alice, body=body, to="bob")

    assert response.json()["scrubbed"] == []
    assert note_row(response).body == body


# --- query counts -----------------------------------------------------------------------------


def test_a_new_thread_to_a_connected_peer_takes_six_statements_three_on_postgresql(
    alice, bob, django_assert_num_queries
):
    # Authentication (which finds no note pending); the addressee with its
    # workspace and project, locked; the addressee's open session, locked;
    # then the writes: the thread, inserted with its note counted; the note;
    # its row in the search index; both participants, in one. On PostgreSQL
    # the writes and the wake-up's NOTIFY are one statement (common.prepared.
    # Writes); on SQLite four, and the wake-up is sent after the commit.
    # (Plus the test transaction's savepoint pair.)
    writes = 4 if connection.vendor == "sqlite" else 1
    with django_assert_num_queries(1 + 2 + writes + 2) as captured:
        response = client_for(alice).post(
            "/api/v1/notes/", {"to": "bob", "body": "hi"}, format="json"
        )
    assert response.status_code == 201, response.json()
    assert response.json()["delivery"] == "session"
    inserts = [table for q in captured for table in re.findall(r'INSERT INTO "(\w+)"', q["sql"])]
    # On SQLite the note's words are queued for the index (common/search/index.py).
    indexed = "mailbox_note_search" + ("_pending" if connection.vendor == "sqlite" else "")
    assert inserts == ["mailbox_conversation", "mailbox_note", indexed, "mailbox_participant"]
    assert not [q for q in captured if re.search(r'\bUPDATE "', q["sql"])]
    assert set(
        Participant.objects.filter(
            conversation__public_id=response.json()["conversation_id"]
        ).values_list("name__handle", "has_written")
    ) == {("alice", True), ("bob", False)}
