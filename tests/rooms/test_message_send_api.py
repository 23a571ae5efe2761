"""``POST /api/v1/rooms/<slug>/messages/`` (send_message): the reply, who may send,
the body and the other fields, seqs and scrubbing (SPEC §4.2 steps 1, 5 and 7).

What the sender has not seen, idempotency and mentions have files of their own
(test_message_unseen.py, test_message_idempotency.py, test_mentions_api.py); together
they cover every sentence of reference/send_message.txt. Every refusal is checked for its
status, its code, that nothing was stored (events, messages, mentions, every room's head
seq and every read position unchanged) and that the idempotency key it carried was not
used up. The same guarantees under real concurrency are in test_room_guarantees.py.
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from common import limits
from rooms.models import Event, Member, Message, Room
from tests.conftest import assert_error
from tests.rooms.messaging import (
    GITHUB_TOKEN,
    GROWING_BODY,
    GROWN_BYTES,
    MESSAGE_FIELDS,
    REDACTED,
    SEND_FIELDS,
    create_room,
    head_seq,
    is_iso_utc,
    join,
    leave,
    post,
    read,
    review,
    send,
    stored_state,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("_no_rate_limits")]


def assert_key_unused(session, key: str, slug="general") -> None:
    """A refused send did not use up its key: a fresh send with it is stored anew."""
    response = send(session, slug, body=f"fresh send with {key}", idempotency_key=key)
    assert response.status_code == 201, response.content
    assert response.json()["replayed"] is False
    assert Message.objects.filter(idempotency_key=key, author=session.name).count() == 1


# --- the reply of a send ----------------------------------------------------------------


def test_a_send_answers_201_with_the_stored_message_and_its_report(alice, general):
    response = send(alice, body="Build **812** is green.")

    assert response.status_code == 201
    body = response.json()
    assert set(body) == SEND_FIELDS
    message = body["message"]
    assert set(message) == MESSAGE_FIELDS
    assert message["id"].startswith("msg")
    assert message["seq"] == 3
    assert message["room"] == "general"
    assert message["author"] == {
        "handle": "alice",
        "display_name": "Alice",
        "display_name_visible": "Alice",
        "kind": "agent",
    }
    assert message["body"] == "Build **812** is green."
    assert message["reply_to"] is None
    assert message["mentions"] == []
    assert message["hidden"] is False
    assert is_iso_utc(message["created_at"])
    assert body["latest_seq"] == 3
    assert body["unseen_before_send"] == 0
    assert body["mentions"] == []
    assert body["unresolved_mentions"] == []
    assert body["mention_warnings"] == []
    assert body["scrubbed"] == []
    assert body["notes"] == []
    assert body["replayed"] is False
    stored = Message.objects.get(public_id=message["id"])
    assert stored.seq == 3
    assert stored.room == general
    assert stored.author == alice.name
    assert stored.body == "Build **812** is green."
    event = Event.objects.get(room=general, seq=3)
    assert event.kind == Event.Kind.MESSAGE
    assert event.message == stored
    assert event.actor == alice.name
    assert head_seq() == 3


def test_a_reply_to_a_message_of_the_room_is_stored_and_shown(alice, bob, general):
    question = post(bob, "Who takes the migration?")

    response = send(alice, body="I do.", reply_to=question["id"])

    assert response.status_code == 201
    assert response.json()["message"]["reply_to"] == question["id"]
    reply = Message.objects.get(public_id=response.json()["message"]["id"])
    assert reply.reply_to.public_id == question["id"]
    events = read(bob, after_seq=0).json()["events"]
    assert events[-1]["message"]["reply_to"] == question["id"]


@pytest.mark.parametrize("where", ["another-room", "unknown"])
def test_a_reply_to_a_message_outside_the_room_is_refused_with_message_not_found(
    alice, general, where
):
    assert create_room(alice, "elsewhere").status_code == 201
    elsewhere = post(alice, "in another room", slug="elsewhere")["id"]
    reply_to = elsewhere if where == "another-room" else "msg_doesnotexist"
    before = stored_state()

    response = send(alice, body="re", reply_to=reply_to, idempotency_key="reply-1")

    assert_error(response, 404, "message_not_found")
    assert stored_state() == before
    assert_key_unused(alice, "reply-1")


# --- who may send ---------------------------------------------------------------------------


def test_an_agent_who_never_joined_cannot_send(carol, general):
    before = stored_state()

    response = send(carol, body="let me in", idempotency_key="outsider")

    assert_error(response, 403, "not_a_member")
    assert stored_state() == before
    join(carol)
    assert_key_unused(carol, "outsider")


def test_a_member_who_left_cannot_send(alice, general):
    leave(alice)
    before = stored_state()

    response = send(alice, body="anyone?", idempotency_key="after-leaving")

    assert_error(response, 403, "not_a_member")
    assert stored_state() == before
    join(alice)
    assert_key_unused(alice, "after-leaving")


def test_a_muted_member_cannot_send(alice, general):
    Member.objects.filter(name=alice.name).update(muted_at=timezone.now())
    before = stored_state()

    response = send(alice, body="let me speak", idempotency_key="muted-1")

    assert_error(response, 403, "member_muted")
    assert stored_state() == before
    Member.objects.filter(name=alice.name).update(muted_at=None)
    assert_key_unused(alice, "muted-1")


def test_a_locked_room_refuses_sends_with_423_room_locked(alice, general):
    Room.objects.filter(pk=general.pk).update(locked_at=timezone.now())
    before = stored_state()

    response = send(alice, body="hello?", idempotency_key="locked-1")

    assert_error(response, 423, "room_locked")
    assert stored_state() == before
    Room.objects.filter(pk=general.pk).update(locked_at=None)
    assert_key_unused(alice, "locked-1")


# --- the body and the other fields ----------------------------------------------------------


def test_a_body_of_exactly_16384_utf8_bytes_is_accepted(alice, general):
    body = "\u00e9" * 8192  # two bytes each in UTF-8: 8192 characters, 16384 bytes

    response = send(alice, body=body)

    assert response.status_code == 201
    assert Message.objects.get(public_id=response.json()["message"]["id"]).body == body


def test_a_body_of_16385_utf8_bytes_is_refused_with_body_too_large(alice, general):
    body = "\u00e9" * 8192 + "a"  # 8193 characters, 16385 bytes
    before = stored_state()

    response = send(alice, body=body, idempotency_key="big-1")

    assert_error(response, 413, "body_too_large")
    assert stored_state() == before
    assert_key_unused(alice, "big-1")


def test_a_body_that_scrubbing_grows_past_the_limit_is_refused_with_stored_bytes(alice, general):
    assert len(GROWING_BODY.encode("utf-8")) <= limits.BODY_MAX_BYTES < GROWN_BYTES
    before = stored_state()

    response = send(alice, body=GROWING_BODY, idempotency_key="grown-1")

    error = assert_error(response, 413, "body_too_large")
    assert error["details"]["stored_bytes"] == GROWN_BYTES
    assert stored_state() == before
    assert_key_unused(alice, "grown-1")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("body", ""),
        ("body", "  \n\t "),
        ("body", "before\x00after"),
        ("body", 42),
        ("body", None),
        ("require_read", "yes"),
        ("require_read", 1),
        ("after_seq", "5"),
        ("after_seq", -1),
        ("after_seq", 1.5),
        ("reply_to", 5),
        ("idempotency_key", ""),
        ("idempotency_key", "k" * 129),
        ("idempotency_key", "cl\u00e9"),
        ("idempotency_key", "tab\tkey"),
        ("idempotency_key", 7),
    ],
    ids=[
        "body-empty",
        "body-whitespace",
        "body-nul",
        "body-int",
        "body-null",
        "require_read-yes",
        "require_read-1",
        "after_seq-string",
        "after_seq-negative",
        "after_seq-float",
        "reply_to-int",
        "key-empty",
        "key-129",
        "key-non-ascii",
        "key-control",
        "key-int",
    ],
)
def test_a_send_with_an_invalid_field_is_refused_with_validation_error(
    alice, general, field, value
):
    payload = {"body": "hello", "idempotency_key": "valid-key", field: value}
    before = stored_state()

    response = send(alice, **payload)

    error = assert_error(response, 400, "validation_error")
    assert field in error["details"]
    assert stored_state() == before
    assert_key_unused(alice, "valid-key")


def test_an_idempotency_key_of_128_printable_ascii_characters_is_accepted(alice, general):
    key = (" ~" + "a" * 126)[:128]

    first = send(alice, body="with a long key", idempotency_key=key)
    retry = send(alice, body="with a long key", idempotency_key=key)

    assert first.status_code == 201
    assert retry.status_code == 200
    assert retry.json()["replayed"] is True
    assert Message.objects.get().idempotency_key == key


def test_a_stale_tool_schema_fingerprint_is_reported_and_never_blocks_the_send(alice, general):
    response = send(alice, body="hello", tool_schema_fingerprint="stale-fingerprint")

    assert response.status_code == 201
    assert set(response.json()["schema_stale"]) == {"current"}
    assert response.json()["schema_stale"]["current"] != "stale-fingerprint"
    assert Message.objects.count() == 1


def test_a_send_without_a_body_is_refused_with_validation_error(alice, general):
    response = send(alice, idempotency_key="no-body")

    error = assert_error(response, 400, "validation_error")
    assert "body" in error["details"]
    assert not Message.objects.exists()
    assert_key_unused(alice, "no-body")


# --- seqs ----------------------------------------------------------------------------------


def test_every_event_kind_takes_the_next_seq_from_1_without_gaps(alice, bob, carol, general):
    first = post(alice, "first")  # 3
    assert review(bob, first["id"], verdict="approve").status_code == 201  # 4
    join(carol)  # 5
    post(carol, "hi all")  # 6
    leave(carol)  # 7
    assert review(bob, first["id"], verdict="comment", body="nit").status_code == 201  # 8

    response = read(bob, after_seq=0, limit=500)

    events = response.json()["events"]
    assert [e["seq"] for e in events] == list(range(1, 9))
    assert [e["kind"] for e in events] == [
        "join",
        "join",
        "message",
        "review",
        "join",
        "message",
        "leave",
        "review",
    ]
    assert response.json()["latest_seq"] == 8
    assert list(Event.objects.filter(room=general).values_list("seq", flat=True)) == list(
        range(1, 9)
    )
    assert head_seq() == 8


def test_refused_calls_take_no_seq(alice, bob, general):
    post(bob, "unread")  # 3
    send(alice, body="", idempotency_key="x")
    send(alice, body="claim", require_read=True)
    send(alice, body="re", reply_to="msg_nothing")
    review(alice, "msg_nothing", verdict="approve")
    review(alice, Message.objects.get().public_id, verdict="lgtm")

    message = post(alice, "stored")

    assert message["seq"] == 4
    assert list(Event.objects.values_list("seq", flat=True)) == [1, 2, 3, 4]


# --- scrubbing ------------------------------------------------------------------------------


def test_a_secret_in_a_message_is_redacted_in_the_row_the_reply_and_the_read(alice, bob, general):
    response = send(alice, body=f"Push with {GITHUB_TOKEN} please.")

    redacted = f"Push with {REDACTED} please."
    assert response.status_code == 201
    assert response.json()["scrubbed"] == [{"kind": "github_token", "count": 1}]
    assert response.json()["message"]["body"] == redacted
    assert Message.objects.get().body == redacted
    assert not Message.objects.filter(body__contains=GITHUB_TOKEN).exists()
    reading = read(bob, after_seq=0)
    assert reading.json()["events"][-1]["message"]["body"] == redacted
    for reply in (response, reading):
        assert GITHUB_TOKEN not in reply.content.decode()


def test_a_retry_of_a_scrubbed_message_replays_it(alice, general):
    body = f"Push with {GITHUB_TOKEN} please."
    original = send(alice, body=body, idempotency_key="secret")

    retry = send(alice, body=body, idempotency_key="secret")

    assert retry.status_code == 200
    assert retry.json()["replayed"] is True
    assert retry.json()["message"]["id"] == original.json()["message"]["id"]
    assert Message.objects.count() == 1
