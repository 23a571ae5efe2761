"""Room messages over HTTP: send_message, read_messages, read positions, reviews, mentions.

Covers SPEC §4.2 to §4.4 and every sentence of reference/send_message.txt. Every
refusal is checked for its status, its code, that nothing was stored (events,
messages, mentions, every room's head seq and every read position unchanged) and,
for sends, that the idempotency key it carried was not used up. The same guarantees
under real concurrency (one message per key, gap-free seqs, racing require_read sends)
are in test_room_guarantees.py.

Most tests run in the room ``general``: bob creates it (seq 1, "Bob"), alice joins
(seq 2, "Alice"). So alice starts caught up (read_seq 2) and bob does not (read_seq 1).
"""

from __future__ import annotations

import time
from datetime import datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from common import limits
from rooms import services
from rooms.models import Event, Member, Message, MessageMention, Room
from tests.conftest import assert_error, client_for
from tests.factories import SessionFactory

pytestmark = pytest.mark.django_db

ROOMS = "/api/v1/rooms/"
MENTIONS = "/api/v1/mentions/"
GITHUB_TOKEN = "ghp_" + "a1B2c3D4e5" * 4
REDACTED = "[REDACTED:github_token]"

SEND_FIELDS = {
    "message",
    "latest_seq",
    "unseen_before_send",
    "mentions",
    "unresolved_mentions",
    "mention_warnings",
    "scrubbed",
    "notes",
    "replayed",
}
MESSAGE_FIELDS = {
    "id",
    "seq",
    "room",
    "author",
    "body",
    "reply_to",
    "mentions",
    "created_at",
    "hidden",
}
EVENT_FIELDS = {"seq", "kind", "created_at", "actor", "message", "review", "moderation"}
READ_FIELDS = {"events", "latest_seq", "read_seq", "has_more", "notes"}


@pytest.fixture(autouse=True)
def _no_rate_limits(settings):
    # Some tests make more calls per second than the default session rate allows.
    settings.PLUMB_RATE_SESSION = None


@pytest.fixture
def general(alice, bob):
    """bob creates ``general`` (seq 1), alice joins it (seq 2)."""
    assert create_room(bob, "general", display_name="Bob").status_code == 201
    assert join(alice, "general", display_name="Alice").status_code == 201
    return Room.objects.get(slug="general")


# --- helpers ---------------------------------------------------------------------------


def create_room(session, slug, **fields):
    return client_for(session).post(ROOMS, {"slug": slug, **fields}, format="json")


def join(session, slug="general", **body):
    return client_for(session).post(f"{ROOMS}{slug}/join", body, format="json")


def leave(session, slug="general"):
    return client_for(session).post(f"{ROOMS}{slug}/leave", {}, format="json")


def send(session, slug="general", **body):
    return client_for(session).post(f"{ROOMS}{slug}/messages/", body, format="json")


def post(session, body: str, slug="general", **fields) -> dict:
    """Send and return the message; the send must succeed."""
    response = send(session, slug, body=body, **fields)
    assert response.status_code == 201, response.content
    return response.json()["message"]


def read(session, slug="general", **params):
    return client_for(session).get(f"{ROOMS}{slug}/messages/", params)


def mark_read(session, slug="general", **body):
    return client_for(session).post(f"{ROOMS}{slug}/read", body, format="json")


def review(session, message_id, slug="general", **body):
    return client_for(session).post(
        f"{ROOMS}{slug}/messages/{message_id}/reviews/", body, format="json"
    )


def mentions_of(session, **params):
    return client_for(session).get(MENTIONS, params)


def read_seq(session, slug="general") -> int:
    return Member.objects.get(room__slug=slug, name=session.name).read_seq


def head_seq(slug="general") -> int:
    return Room.objects.get(slug=slug).head_seq


def stored_state() -> tuple:
    """Everything a refused call must leave as it was."""
    return (
        list(Room.objects.order_by("slug").values_list("slug", "head_seq", "locked_at")),
        list(
            Member.objects.order_by("pk").values_list(
                "room__slug", "name__handle", "read_seq", "left_at", "muted_at"
            )
        ),
        list(Event.objects.order_by("pk").values_list("room__slug", "seq", "kind")),
        list(Message.objects.order_by("pk").values_list("public_id", "body", "idempotency_key")),
        MessageMention.objects.count(),
    )


def assert_key_unused(session, key: str, slug="general") -> None:
    """A refused send did not use up its key: a fresh send with it is stored anew."""
    response = send(session, slug, body=f"fresh send with {key}", idempotency_key=key)
    assert response.status_code == 201, response.content
    assert response.json()["replayed"] is False
    assert Message.objects.filter(idempotency_key=key, author=session.name).count() == 1


def seed_messages(session, count: int, slug="general") -> list[Message]:
    """``count`` messages by ``session`` in bulk, numbered as message_send numbers them."""
    room = Room.objects.get(slug=slug)
    start = room.head_seq
    before = Message.objects.filter(room=room).count()
    own_before = Message.objects.filter(room=room, author=session.name).count()
    now = timezone.now()
    messages = Message.objects.bulk_create(
        Message(
            room=room,
            seq=start + i,
            ordinal=before + i,
            author_ordinal=own_before + i,
            author=session.name,
            body=f"seeded {i}",
            created_at=now,
        )
        for i in range(1, count + 1)
    )
    Event.objects.bulk_create(
        Event(
            room=room,
            seq=m.seq,
            kind=Event.Kind.MESSAGE,
            actor=session.name,
            message=m,
            created_at=now,
        )
        for m in messages
    )
    Room.objects.filter(pk=room.pk).update(head_seq=start + count)
    return messages


def is_iso_utc(value: str) -> bool:
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed.utcoffset() is not None and parsed.utcoffset().total_seconds() == 0


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


# Each 11-byte line grows to 39 bytes once scrubbed ("-p[REDACTED:password_assignment]").
GROWING_BODY = "mysql -px9\n" * 500
GROWN_BYTES = len("mysql -p[REDACTED:password_assignment]\n") * 500


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


# --- latest_seq and unseen_before_send ------------------------------------------------------


def test_latest_seq_is_the_head_after_the_send_counting_its_own_event(alice, general):
    response = send(alice, body="one")

    assert response.json()["latest_seq"] == response.json()["message"]["seq"] == 3
    assert head_seq() == 3


def test_latest_seq_advances_on_joins_and_reviews_but_unseen_counts_only_messages(
    alice, bob, carol, general
):
    first = post(alice, "first")  # 3; alice is caught up, read_seq 3
    join(carol)  # 4
    review(bob, first["id"], verdict="approve")  # 5

    response = send(alice, body="second")

    assert response.json()["message"]["seq"] == 6
    assert response.json()["latest_seq"] == 6
    assert response.json()["unseen_before_send"] == 0


def test_unseen_before_send_counts_messages_from_others_above_after_seq_when_given(
    alice, bob, general
):
    post(bob, "a")  # 3
    post(bob, "b")  # 4
    post(bob, "c")  # 5

    from_4 = send(alice, body="seen up to 4", after_seq=4)
    from_0 = send(alice, body="seen nothing", after_seq=0)

    assert from_4.json()["unseen_before_send"] == 1
    # The joins at seq 1 and 2 and alice's own message at 6 are not counted.
    assert from_0.json()["unseen_before_send"] == 3


def test_unseen_before_send_uses_the_stored_read_seq_when_after_seq_is_omitted(alice, bob, general):
    post(bob, "a")  # 3
    post(bob, "b")  # 4
    first = send(alice, body="without reading")  # 5
    read(alice)  # read_seq 5
    post(bob, "c")  # 6

    second = send(alice, body="after reading")

    assert first.json()["unseen_before_send"] == 2
    assert second.json()["unseen_before_send"] == 1


def test_own_messages_never_count_as_unseen(alice, general):
    post(alice, "one")
    post(alice, "two")
    post(alice, "three")

    response = send(alice, body="four", after_seq=0)

    assert response.json()["unseen_before_send"] == 0


def test_unseen_before_send_does_not_count_reviews(alice, bob, general):
    mine = post(alice, "please review")  # 3, read_seq 3
    review(bob, mine["id"], verdict="request_changes", body="see line 4")  # 4
    review(bob, mine["id"], verdict="approve")  # 5

    response = send(alice, body="fixed", after_seq=3)

    assert response.json()["unseen_before_send"] == 0
    assert response.json()["latest_seq"] == 6


# --- require_read ----------------------------------------------------------------------------


def test_require_read_refuses_while_a_message_from_others_is_unread(alice, bob, general):
    unread = post(bob, "I am on the migration")  # 3
    before = stored_state()

    response = send(
        alice, body="Status: I own the migration", require_read=True, idempotency_key="claim-1"
    )

    error = assert_error(response, 409, "unread_messages")
    assert set(error["details"]) == {"unseen", "unseen_count", "latest_seq"}
    assert error["details"]["unseen_count"] == 1
    assert error["details"]["latest_seq"] == 3
    [event] = error["details"]["unseen"]
    assert set(event) == EVENT_FIELDS
    assert event["seq"] == 3
    assert event["kind"] == "message"
    assert event["actor"]["handle"] == "bob"
    assert event["message"]["id"] == unread["id"]
    assert event["message"]["body"] == "I am on the migration"
    assert stored_state() == before


def test_require_read_refuses_while_a_review_from_others_is_unread(alice, bob, general):
    mine = post(alice, "ready for review")  # 3, read_seq 3
    review(bob, mine["id"], verdict="request_changes", body="not yet")  # 4
    before = stored_state()

    response = send(alice, body="Verdict: merged", require_read=True)

    error = assert_error(response, 409, "unread_messages")
    assert [e["kind"] for e in error["details"]["unseen"]] == ["review"]
    assert error["details"]["unseen"][0]["review"] == {
        "message_id": mine["id"],
        "verdict": "request_changes",
        "body": "not yet",
    }
    assert error["details"]["unseen_count"] == 1
    assert stored_state() == before


def test_require_read_measures_from_after_seq_when_given(alice, bob, general):
    post(bob, "round 1 done")  # 3; alice's stored read_seq stays 2
    before = stored_state()

    behind = send(alice, body="Round 2 starts", require_read=True, after_seq=2)
    assert_error(behind, 409, "unread_messages")
    assert stored_state() == before

    current = send(alice, body="Round 2 starts", require_read=True, after_seq=3)
    assert current.status_code == 201
    assert current.json()["unseen_before_send"] == 0


def test_require_read_is_not_blocked_by_joins_and_leaves_of_others(alice, carol, general):
    join(carol)  # 3
    leave(carol)  # 4

    response = send(alice, body="Status: all quiet", require_read=True)

    assert response.status_code == 201
    assert response.json()["message"]["seq"] == 5


def test_require_read_is_not_blocked_by_own_messages(alice, general):
    post(alice, "one")
    post(alice, "two")

    response = send(alice, body="Status: done", require_read=True, after_seq=2)

    assert response.status_code == 201


def test_after_reading_the_refused_send_succeeds_with_the_same_idempotency_key(alice, bob, general):
    post(bob, "I took round 3")
    refused = send(alice, body="I take round 3", require_read=True, idempotency_key="round-3")
    assert_error(refused, 409, "unread_messages")

    assert read(alice).status_code == 200
    response = send(alice, body="I take round 4", require_read=True, idempotency_key="round-3")

    assert response.status_code == 201
    assert response.json()["replayed"] is False
    assert Message.objects.filter(idempotency_key="round-3").count() == 1


def test_the_refusal_lists_at_most_50_unseen_events_oldest_first_and_counts_them_all(
    alice, bob, general
):
    seed_messages(bob, 60)  # seqs 3 to 62
    before = stored_state()

    response = send(alice, body="Status: caught up", require_read=True)

    error = assert_error(response, 409, "unread_messages")
    assert [e["seq"] for e in error["details"]["unseen"]] == list(range(3, 53))
    assert error["details"]["unseen"][0]["message"]["body"] == "seeded 1"
    assert error["details"]["unseen_count"] == 60
    assert error["details"]["latest_seq"] == 62
    assert stored_state() == before


# --- the sender's read position (step 5) -----------------------------------------------------


def test_a_caught_up_senders_read_position_moves_to_its_own_message(alice, general):
    response = send(alice, body="nothing new from anyone")

    assert read_seq(alice) == response.json()["message"]["seq"] == 3
    room = client_for(alice).get(f"{ROOMS}general/").json()["room"]
    assert room["read_seq"] == 3
    assert room["unseen"] == 0


def test_a_sender_with_unread_messages_from_others_keeps_its_read_position(alice, bob, general):
    post(bob, "unread by alice")  # 3

    send(alice, body="talking over it")  # 4

    assert read_seq(alice) == 2
    assert client_for(alice).get(f"{ROOMS}general/").json()["room"]["unseen"] == 1
    assert [e["seq"] for e in read(alice).json()["events"]] == [3, 4]


# --- idempotency ---------------------------------------------------------------------------


def test_a_retry_with_the_same_key_and_body_replays_the_original_after_the_room_moved_on(
    alice, bob, general
):
    original = send(alice, body="deploying 812", idempotency_key="deploy-812")
    post(bob, "ok")
    post(bob, "go ahead")
    before = stored_state()

    retry = send(alice, body="deploying 812", idempotency_key="deploy-812")

    assert retry.status_code == 200
    body = retry.json()
    assert set(body) == SEND_FIELDS
    assert body["replayed"] is True
    assert body["message"] == original.json()["message"]
    assert body["latest_seq"] == 5
    assert body["notes"] == []
    assert stored_state() == before


def test_a_replay_reports_what_the_original_send_reported(alice, bob, general):
    post(bob, "one")
    post(bob, "two")
    original = send(alice, body="@bob @nobdy noted", idempotency_key="noted")
    post(bob, "three")

    retry = send(alice, body="@bob @nobdy noted", idempotency_key="noted")

    assert original.json()["unseen_before_send"] == 2
    assert retry.json()["unseen_before_send"] == 2
    for field in ("mentions", "unresolved_mentions", "mention_warnings"):
        assert retry.json()[field] == original.json()[field]
    assert retry.json()["unresolved_mentions"] == ["@nobdy"]


def test_a_retry_replays_even_after_the_room_was_locked(alice, general):
    original = send(alice, body="last words", idempotency_key="last")
    Room.objects.filter(pk=general.pk).update(locked_at=timezone.now())

    retry = send(alice, body="last words", idempotency_key="last")

    assert retry.status_code == 200
    assert retry.json()["replayed"] is True
    assert retry.json()["message"]["id"] == original.json()["message"]["id"]


def test_the_same_key_with_a_different_body_is_refused_with_idempotency_key_reused(alice, general):
    post(alice, "deploying 812", idempotency_key="deploy")
    before = stored_state()

    response = send(alice, body="deploying 813", idempotency_key="deploy")

    assert_error(response, 409, "idempotency_key_reused")
    assert stored_state() == before


def test_the_same_key_with_a_different_reply_to_is_refused_with_idempotency_key_reused(
    alice, general
):
    parent = post(alice, "the plan")
    post(alice, "agreed", idempotency_key="ack")
    before = stored_state()

    response = send(alice, body="agreed", idempotency_key="ack", reply_to=parent["id"])

    assert_error(response, 409, "idempotency_key_reused")
    assert stored_state() == before


def test_another_author_may_use_the_same_key_in_the_same_room(alice, bob, general):
    mine = post(alice, "same words", idempotency_key="shared")

    response = send(bob, body="same words", idempotency_key="shared")

    assert response.status_code == 201
    assert response.json()["replayed"] is False
    assert response.json()["message"]["id"] != mine["id"]
    assert Message.objects.filter(idempotency_key="shared").count() == 2


def test_the_same_author_may_use_the_same_key_in_another_room(alice, general):
    mine = post(alice, "same words", idempotency_key="shared")
    assert create_room(alice, "elsewhere").status_code == 201

    response = send(alice, "elsewhere", body="same words", idempotency_key="shared")

    assert response.status_code == 201
    assert response.json()["replayed"] is False
    assert response.json()["message"]["id"] != mine["id"]
    assert response.json()["message"]["room"] == "elsewhere"


# --- mentions -------------------------------------------------------------------------------


def test_an_at_handle_of_a_member_resolves_to_that_member(alice, bob, general):
    response = send(alice, body="@bob can you review?")

    bob_mention = {"handle": "bob", "display_name": "Bob", "display_name_visible": "Bob"}
    assert response.json()["mentions"] == [bob_mention]
    assert response.json()["message"]["mentions"] == [bob_mention]
    assert response.json()["unresolved_mentions"] == []
    assert response.json()["mention_warnings"] == []
    message = Message.objects.get(public_id=response.json()["message"]["id"])
    assert list(MessageMention.objects.values_list("message", "name")) == [
        (message.pk, bob.name_id)
    ]


def test_a_misspelled_mention_is_unresolved_exactly_as_typed_once_each(alice, general):
    response = send(alice, body="@nobdy, @Nobdy and @nobdy again, and @bob")

    assert response.json()["unresolved_mentions"] == ["@nobdy", "@Nobdy"]
    assert [m["handle"] for m in response.json()["mentions"]] == ["bob"]


def test_an_at_handle_inside_code_is_not_a_mention(alice, general):
    body = "Call `@bob` here.\n\n```\n@bob\n```\n\n    @bob indented"

    response = send(alice, body=body)

    assert response.json()["mentions"] == []
    assert response.json()["unresolved_mentions"] == []
    assert not MessageMention.objects.exists()


def test_an_email_address_is_not_a_mention(alice, general):
    response = send(alice, body="Mail me@example.com or https://host/@bob")

    assert response.json()["mentions"] == []
    assert response.json()["unresolved_mentions"] == []


def test_a_mention_of_an_agent_outside_the_room_is_unresolved(alice, carol, general):
    response = send(alice, body="@carol please join")

    assert response.json()["mentions"] == []
    assert response.json()["unresolved_mentions"] == ["@carol"]
    assert not MessageMention.objects.exists()


def test_a_mention_of_a_member_who_left_is_unresolved(alice, bob, carol, general):
    join(carol)
    leave(carol)

    response = send(alice, body="@carol are you there?")

    assert response.json()["mentions"] == []
    assert response.json()["unresolved_mentions"] == ["@carol"]


def test_a_handle_typed_with_an_invisible_character_resolves_with_a_warning(alice, general):
    response = send(alice, body="@bo\u200bb look")

    assert [m["handle"] for m in response.json()["mentions"]] == ["bob"]
    assert response.json()["unresolved_mentions"] == []
    assert response.json()["mention_warnings"] == [
        {"typed": "@bo\u200bb", "handle": "bob", "reason": "invisible_characters"}
    ]


def test_a_cyrillic_look_alike_does_not_resolve_and_warns_it_is_confusable(alice, general):
    response = send(alice, body="@b\u043eb look")

    assert response.json()["mentions"] == []
    assert response.json()["unresolved_mentions"] == ["@b\u043eb"]
    assert response.json()["mention_warnings"] == [
        {"typed": "@b\u043eb", "handle": "bob", "reason": "confusable"}
    ]
    assert not MessageMention.objects.exists()


def test_a_resolved_mention_shows_the_members_display_name_visibly(alice, carol, general):
    join(carol, display_name="Car\u200bol \u202eadmin")

    response = send(alice, body="@carol hello")

    assert response.json()["mentions"] == [
        {
            "handle": "carol",
            "display_name": "Car\u200bol \u202eadmin",
            "display_name_visible": "Car<U+200B>ol <U+202E>admin",
        }
    ]


def test_display_names_never_resolve_a_mention_only_handles_do(alice, carol, general):
    assert create_room(alice, "side").status_code == 201
    join(carol, "side", display_name="bob")

    response = send(alice, "side", body="@bob are you here?")

    assert response.json()["mentions"] == []
    assert response.json()["unresolved_mentions"] == ["@bob"]


def test_the_mentions_list_shows_messages_mentioning_the_caller_across_rooms_oldest_first(
    alice, bob, general
):
    assert create_room(alice, "second").status_code == 201
    join(bob, "second")
    one = post(alice, "@bob one")
    post(alice, "no mention here")
    two = post(alice, "@bob two", slug="second")
    post(bob, "@alice not for bob")
    three = post(alice, "@Bob three")

    response = mentions_of(bob)

    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"mentions", "has_more", "notes"}
    assert [m["id"] for m in body["mentions"]] == [one["id"], two["id"], three["id"]]
    assert [m["room"] for m in body["mentions"]] == ["general", "second", "general"]
    assert all(set(m) == MESSAGE_FIELDS for m in body["mentions"])
    assert body["has_more"] is False
    assert [m["id"] for m in mentions_of(alice).json()["mentions"]] == [
        Message.objects.get(body="@alice not for bob").public_id
    ]


def test_the_mentions_list_pages_with_after_id_and_has_more(alice, bob, general):
    ids = [post(alice, f"@bob number {i}")["id"] for i in range(3)]

    first = mentions_of(bob, limit=2)
    rest = mentions_of(bob, limit=2, after_id=first.json()["mentions"][-1]["id"])

    assert [m["id"] for m in first.json()["mentions"]] == ids[:2]
    assert first.json()["has_more"] is True
    assert [m["id"] for m in rest.json()["mentions"]] == ids[2:]
    assert rest.json()["has_more"] is False


@pytest.mark.parametrize("after_id", ["msg_unknown", "other-message"])
def test_the_mentions_list_refuses_an_after_id_that_is_no_mention_of_the_caller(
    alice, bob, general, after_id
):
    post(alice, "@bob hi")
    not_mine = post(bob, "@alice hi")["id"]

    response = mentions_of(bob, after_id=not_mine if after_id == "other-message" else after_id)

    assert_error(response, 404, "message_not_found")


@pytest.mark.parametrize("limit", [0, 201, "many"])
def test_the_mentions_list_refuses_a_bad_limit(alice, limit):
    assert_error(mentions_of(alice, limit=limit), 400, "validation_error")


# --- read_messages ---------------------------------------------------------------------------


def test_reading_returns_events_after_the_read_position_ascending_and_advances_it(
    alice, bob, general
):
    ids = [post(bob, f"note {i}")["id"] for i in range(3)]  # 3, 4, 5

    response = read(alice)

    assert response.status_code == 200
    body = response.json()
    assert set(body) == READ_FIELDS
    assert [e["seq"] for e in body["events"]] == [3, 4, 5]
    assert [e["message"]["id"] for e in body["events"]] == ids
    assert body["latest_seq"] == 5
    assert body["read_seq"] == 5
    assert body["has_more"] is False
    assert body["notes"] == []
    assert read_seq(alice) == 5
    assert read(alice).json()["events"] == []


def test_events_embed_their_message_and_name_their_actor(alice, bob, general):
    message = post(alice, "hello")
    review(bob, message["id"], verdict="comment", body="hi")

    events = read(bob, after_seq=0).json()["events"]

    assert all(set(e) == EVENT_FIELDS for e in events)
    join_event, _, message_event, review_event = events
    assert join_event["kind"] == "join"
    assert join_event["actor"] == {
        "handle": "bob",
        "display_name": "Bob",
        "display_name_visible": "Bob",
    }
    assert join_event["message"] is None
    assert join_event["review"] is None
    assert join_event["moderation"] is None
    assert is_iso_utc(join_event["created_at"])
    assert message_event["message"] == message
    assert message_event["review"] is None
    assert review_event["message"] is None
    assert review_event["review"] == {
        "message_id": message["id"],
        "verdict": "comment",
        "body": "hi",
    }


def test_the_default_limit_is_50_with_has_more(alice, bob, general):
    seed_messages(bob, 60)  # 3 to 62

    first = read(alice, after_seq=0)
    second = read(alice)

    assert [e["seq"] for e in first.json()["events"]] == list(range(1, 51))
    assert first.json()["has_more"] is True
    assert first.json()["read_seq"] == 50
    assert [e["seq"] for e in second.json()["events"]] == list(range(51, 63))
    assert second.json()["has_more"] is False
    assert second.json()["read_seq"] == 62
    assert read_seq(alice) == 62


def test_the_limit_goes_up_to_500(alice, bob, general):
    seed_messages(bob, 505)

    response = read(alice, after_seq=0, limit=500)

    assert len(response.json()["events"]) == 500
    assert response.json()["events"][-1]["seq"] == 500
    assert response.json()["has_more"] is True
    assert response.json()["latest_seq"] == 507


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("limit", 0),
        ("limit", 501),
        ("limit", "ten"),
        ("after_seq", -1),
        ("after_seq", "x"),
        ("kinds", "message,bogus"),
        ("kinds", ","),
        ("mark_read", "yes"),
        ("wait", -1),
        ("wait", limits.WAIT_MAX + 0.5),
        ("wait", "soon"),
    ],
    ids=[
        "limit-0",
        "limit-501",
        "limit-word",
        "after_seq-negative",
        "after_seq-word",
        "kinds-unknown",
        "kinds-empty",
        "mark_read-yes",
        "wait-negative",
        "wait-too-long",
        "wait-word",
    ],
)
def test_reading_with_an_invalid_parameter_is_refused_with_validation_error(
    alice, bob, general, field, value
):
    post(bob, "unread")
    before = stored_state()

    response = read(alice, **{field: value})

    error = assert_error(response, 400, "validation_error")
    assert field in error["details"]
    assert stored_state() == before


def test_kinds_filters_the_events_returned(alice, bob, carol, general):
    message = post(alice, "please look")  # 3
    join(carol)  # 4
    review(bob, message["id"], verdict="approve")  # 5
    leave(carol)  # 6

    response = read(bob, after_seq=0, kinds="message,review")

    assert [(e["seq"], e["kind"]) for e in response.json()["events"]] == [
        (3, "message"),
        (5, "review"),
    ]
    # What the filter left out were joins and a leave, which need no reading.
    assert response.json()["read_seq"] == 5
    assert response.json()["latest_seq"] == 6


def test_reading_never_moves_the_read_position_backwards(alice, bob, general):
    seed_messages(bob, 8)  # up to 10
    assert read(alice).json()["read_seq"] == 10

    response = read(alice, after_seq=0, limit=3)

    assert [e["seq"] for e in response.json()["events"]] == [1, 2, 3]
    assert response.json()["read_seq"] == 10
    assert read_seq(alice) == 10


def test_mark_read_false_leaves_the_read_position(alice, bob, general):
    post(bob, "one")
    post(bob, "two")

    response = read(alice, mark_read="false")

    assert [e["seq"] for e in response.json()["events"]] == [3, 4]
    assert response.json()["read_seq"] == 2
    assert read_seq(alice) == 2


def test_a_hidden_message_shows_hidden_and_no_body(alice, bob, general):
    message = post(bob, "something regrettable")
    Message.objects.filter(public_id=message["id"]).update(
        hidden_at=timezone.now(), hidden_reason="spam"
    )

    response = read(alice)

    [event] = response.json()["events"]
    assert event["message"]["id"] == message["id"]
    assert event["message"]["hidden"] is True
    assert event["message"]["body"] is None
    assert "something regrettable" not in response.content.decode()


def test_a_hidden_message_has_no_body_in_the_unread_refusal_and_the_mentions_list(
    alice, bob, general
):
    message = post(bob, "@alice something regrettable")
    Message.objects.filter(public_id=message["id"]).update(hidden_at=timezone.now())

    refusal = send(alice, body="Status: ok", require_read=True)
    mentions = mentions_of(alice)

    [unseen] = assert_error(refusal, 409, "unread_messages")["details"]["unseen"]
    assert unseen["message"]["hidden"] is True
    assert unseen["message"]["body"] is None
    [mention] = mentions.json()["mentions"]
    assert mention["hidden"] is True
    assert mention["body"] is None
    for response in (refusal, mentions):
        assert "regrettable" not in response.content.decode()


# --- read_messages with wait (the rules, with threads: tests/rooms/test_waiting.py) ----------


def test_a_read_with_wait_answers_at_once_when_an_event_is_above_the_reference(alice, bob, general):
    post(bob, "already here")

    started = time.monotonic()
    response = read(alice, wait=limits.WAIT_MAX)

    assert time.monotonic() - started < limits.WAIT_MAX / 2
    assert response.status_code == 200
    assert set(response.json()) == READ_FIELDS
    assert [e["message"]["body"] for e in response.json()["events"]] == ["already here"]
    assert response.json()["read_seq"] == read_seq(alice) == 3


def test_a_read_with_wait_times_out_with_no_events_and_the_read_position_unmoved(alice, general):
    response = read(alice, wait=0.2, kinds="message")

    assert response.status_code == 200
    assert response.json() == {
        "events": [],
        "latest_seq": 2,
        "read_seq": 2,
        "has_more": False,
        "notes": [],
    }
    assert read_seq(alice) == 2


@pytest.mark.parametrize(
    ("slug", "status", "code"),
    [("general", 403, "not_a_member"), ("nowhere", 404, "room_not_found")],
    ids=["not-a-member", "no-room"],
)
def test_a_read_with_wait_is_refused_at_once_as_a_read_is(carol, general, slug, status, code):
    before = stored_state()

    started = time.monotonic()
    response = read(carol, slug, wait=limits.WAIT_MAX)

    assert time.monotonic() - started < limits.WAIT_MAX / 2
    assert_error(response, status, code)
    assert stored_state() == before


# --- POST read ------------------------------------------------------------------------------


def test_posting_a_read_position_sets_it_forward_only(alice, bob, general):
    seed_messages(bob, 5)  # up to 7

    forward = mark_read(alice, seq=6)
    backward = mark_read(alice, seq=3)

    assert forward.status_code == 200
    assert forward.json() == {"read_seq": 6, "latest_seq": 7, "notes": []}
    assert backward.status_code == 200
    assert backward.json()["read_seq"] == 6
    assert read_seq(alice) == 6
    assert [e["seq"] for e in read(alice).json()["events"]] == [7]


@pytest.mark.parametrize(
    "body",
    [{"seq": 4}, {"seq": "2"}, {"seq": -1}, {"seq": True}, {}],
    ids=["beyond-latest", "string", "negative", "bool", "missing"],
)
def test_posting_an_invalid_read_position_is_refused_with_validation_error(alice, general, body):
    before = stored_state()

    response = mark_read(alice, **body)

    error = assert_error(response, 400, "validation_error")
    assert "seq" in error["details"]
    assert stored_state() == before


# --- reviews -------------------------------------------------------------------------------


@pytest.mark.parametrize("verdict", ["approve", "request_changes", "comment"])
@pytest.mark.parametrize("text", [None, "Looks right to me."], ids=["no-body", "body"])
def test_a_review_appends_a_review_event_with_its_own_seq(alice, bob, general, verdict, text):
    message = post(alice, "PR 42 is ready")  # 3
    payload = {"verdict": verdict} if text is None else {"verdict": verdict, "body": text}

    response = review(bob, message["id"], **payload)

    assert response.status_code == 201
    body = response.json()
    assert set(body) == {"event", "latest_seq", "notes"}
    assert body["notes"] == []
    assert body["latest_seq"] == 4
    assert set(body["event"]) == EVENT_FIELDS
    assert body["event"]["seq"] == 4
    assert body["event"]["kind"] == "review"
    assert body["event"]["actor"]["handle"] == "bob"
    assert body["event"]["review"] == {
        "message_id": message["id"],
        "verdict": verdict,
        "body": text,
    }
    event = Event.objects.get(room=general, seq=4)
    assert event.kind == Event.Kind.REVIEW
    assert event.verdict == verdict
    assert event.message.public_id == message["id"]
    assert event.body == (text or "")
    assert head_seq() == 4


def test_a_review_body_is_secret_scrubbed(alice, bob, general):
    message = post(alice, "how do I push?")

    response = review(bob, message["id"], verdict="comment", body=f"use {GITHUB_TOKEN}")

    assert response.json()["event"]["review"]["body"] == f"use {REDACTED}"
    assert Event.objects.get(kind="review").body == f"use {REDACTED}"
    assert GITHUB_TOKEN not in response.content.decode()
    assert GITHUB_TOKEN not in read(alice, after_seq=0).content.decode()


@pytest.mark.parametrize(
    "payload",
    [{"verdict": "lgtm"}, {"verdict": None}, {}, {"verdict": "approve", "body": "a\x00b"}],
    ids=["unknown", "null", "missing", "nul-body"],
)
def test_a_bad_review_is_refused_with_validation_error(alice, bob, general, payload):
    message = post(alice, "review me")
    before = stored_state()

    response = review(bob, message["id"], **payload)

    error = assert_error(response, 400, "validation_error")
    assert set(error["details"]) & {"verdict", "body"}
    assert stored_state() == before


def test_a_review_body_over_16384_bytes_is_refused_with_body_too_large(alice, bob, general):
    message = post(alice, "review me")
    before = stored_state()

    response = review(bob, message["id"], verdict="comment", body="x" * 16385)

    assert_error(response, 413, "body_too_large")
    assert stored_state() == before


def test_a_review_body_that_scrubbing_grows_past_the_limit_is_refused(alice, bob, general):
    message = post(alice, "review me")
    before = stored_state()

    response = review(bob, message["id"], verdict="comment", body=GROWING_BODY)

    error = assert_error(response, 413, "body_too_large")
    assert error["details"]["stored_bytes"] == GROWN_BYTES
    assert stored_state() == before


@pytest.mark.parametrize("where", ["unknown", "another-room"])
def test_reviewing_a_message_outside_the_room_is_refused_with_message_not_found(
    alice, bob, general, where
):
    assert create_room(bob, "elsewhere").status_code == 201
    elsewhere = post(bob, "over here", slug="elsewhere")["id"]
    message_id = elsewhere if where == "another-room" else "msg_unknown"
    before = stored_state()

    response = review(bob, message_id, verdict="approve")

    assert_error(response, 404, "message_not_found")
    assert stored_state() == before


def test_a_muted_member_cannot_review(alice, bob, general):
    message = post(alice, "review me")
    Member.objects.filter(name=bob.name).update(muted_at=timezone.now())
    before = stored_state()

    response = review(bob, message["id"], verdict="approve")

    assert_error(response, 403, "member_muted")
    assert stored_state() == before


def test_a_locked_room_refuses_reviews_with_423(alice, bob, general):
    message = post(alice, "review me")
    Room.objects.filter(pk=general.pk).update(locked_at=timezone.now())
    before = stored_state()

    response = review(bob, message["id"], verdict="approve")

    assert_error(response, 423, "room_locked")
    assert stored_state() == before


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


# --- query counts ---------------------------------------------------------------------------

# Beyond SQLite a send locks its room by a statement of its own before it reads its figures:
# under READ COMMITTED a statement that waited for the lock would read them from before the
# wait (rooms/services/sending.py).
ROOM_LOCKED_FIRST = 0 if connection.vendor == "sqlite" else 1
# On PostgreSQL the event's wake-up is a NOTIFY inside the send's transaction, so that
# other hosts hear of it exactly at the commit (common/wake.py); on SQLite it is sent after.
WAKE_NOTIFY = 0 if connection.vendor == "sqlite" else 1
# Authentication (which also finds no note pending), the room locked with the caller's
# membership and the unseen figures, the idempotency look-up, members for mentions, message
# insert, head update, event insert, mention insert (and the test transaction's savepoint
# pair).
SEND_QUERIES = 10 + ROOM_LOCKED_FIRST + WAKE_NOTIFY
# Authentication, the room with the caller's membership, the page of events, read position
# update.
READ_QUERIES = 4
# Authentication, the room locked with the caller's membership and figures, the unseen page
# and its count (and savepoints).
REFUSAL_QUERIES = 7 + ROOM_LOCKED_FIRST


def seed_room(slug: str, *, members: int, events: int, workspace) -> list:
    """A room with ``members`` members and ``events`` events, made through the services:
    joins, messages with mentions, replies and reviews."""
    sessions = [SessionFactory(workspace=workspace, name=f"{slug}-m{i}") for i in range(members)]
    services.room_create(sessions[0], slug=slug)
    for session in sessions[1:]:
        services.room_join(session, slug)
    previous = None
    for seq in range(members + 1, events + 1):
        author = sessions[seq % members]
        if previous is not None and previous.seq % 5 == 0:
            services.review_add(author, slug, previous.public_id, verdict="approve", body="ok")
            previous = None
            continue
        previous = services.message_send(
            author,
            slug,
            body=f"@{sessions[0].name.handle} see @{sessions[-1].name.handle}",
            reply_to=previous.public_id if previous is not None else None,
        ).message
    assert head_seq(slug) == events
    return sessions


def queries_of(call) -> tuple[int, object]:
    with CaptureQueriesContext(connection) as queries:
        response = call()
    return len(queries), response


@pytest.fixture
def small_and_big_rooms(workspace, settings):
    settings.PLUMB_SEEN_WRITE_INTERVAL = 3600  # no last_seen_at write, however long seeding takes
    small = seed_room("small", members=3, events=5, workspace=workspace)
    big = seed_room("big", members=30, events=200, workspace=workspace)
    return small, big


def test_sending_runs_the_same_queries_in_small_and_big_rooms(
    small_and_big_rooms, django_assert_max_num_queries
):
    small, big = small_and_big_rooms

    def send_in(sessions, slug):
        body = " ".join(f"@{s.name.handle}" for s in sessions) + " status?"
        return lambda: send(sessions[1], slug, body=body, after_seq=0, idempotency_key="q")

    with django_assert_max_num_queries(SEND_QUERIES):
        small_count, small_reply = queries_of(send_in(small, "small"))
    with django_assert_max_num_queries(SEND_QUERIES):
        big_count, big_reply = queries_of(send_in(big, "big"))

    assert small_reply.status_code == big_reply.status_code == 201
    print(f"\nqueries per send_message: {small_count}")
    assert len(big_reply.json()["mentions"]) == 30
    assert big_count == small_count


def test_reading_50_events_runs_the_same_queries_in_small_and_big_rooms(
    small_and_big_rooms, django_assert_max_num_queries
):
    small, big = small_and_big_rooms

    with django_assert_max_num_queries(READ_QUERIES):
        small_count, small_reply = queries_of(lambda: read(small[1], "small", after_seq=0))
    with django_assert_max_num_queries(READ_QUERIES):
        big_count, big_reply = queries_of(lambda: read(big[1], "big", after_seq=100))

    print(f"\nqueries per read_messages: {small_count}")
    assert len(small_reply.json()["events"]) == 5
    assert len(big_reply.json()["events"]) == 50
    assert {e["kind"] for e in big_reply.json()["events"]} == {"message", "review"}
    assert any(e["message"] and e["message"]["reply_to"] for e in big_reply.json()["events"])
    assert big_count == small_count


def test_a_require_read_refusal_runs_the_same_queries_in_small_and_big_rooms(
    small_and_big_rooms, django_assert_max_num_queries
):
    small, big = small_and_big_rooms

    with django_assert_max_num_queries(REFUSAL_QUERIES):
        small_count, small_reply = queries_of(
            lambda: send(small[1], "small", body="claim", after_seq=0, require_read=True)
        )
    with django_assert_max_num_queries(REFUSAL_QUERIES):
        big_count, big_reply = queries_of(
            lambda: send(big[1], "big", body="claim", after_seq=0, require_read=True)
        )

    print(f"\nqueries per require_read refusal: {small_count}")
    assert small_reply.status_code == big_reply.status_code == 409
    assert len(big_reply.json()["error"]["details"]["unseen"]) == 50
    assert big_count == small_count


def test_a_filtered_read_never_moves_past_a_message_it_left_out(alice, bob, general):
    plan = post(alice, "the plan")  # 3
    review(alice, plan["id"], verdict="comment")  # 4
    post(alice, "a change to the plan")  # 5
    review(alice, plan["id"], verdict="approve")  # 6
    read(bob, after_seq=0, limit=2)  # bob has seen 1 and 2
    assert read_seq(bob) == 2

    response = read(bob, kinds="review")

    assert [e["seq"] for e in response.json()["events"]] == [4, 6]
    # Message 3 was left out: the read position stays just below it.
    assert response.json()["read_seq"] == 2
    assert read_seq(bob) == 2
    # So a require_read send still stops bob from talking over both messages.
    refused = send(bob, body="LGTM", require_read=True)
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "unread_messages"
    assert [e["seq"] for e in refused.json()["error"]["details"]["unseen"]] == [3, 4, 5, 6]
    assert head_seq() == 6


def test_a_filtered_read_passes_events_that_need_no_reading(alice, bob, general):
    plan = post(alice, "the plan")  # 3
    review(alice, plan["id"], verdict="comment")  # 4
    leave(alice)  # 5
    post(bob, "anyone?")  # 6
    read(bob, after_seq=0, limit=2)  # bob has seen 1 and 2

    response = read(bob, kinds="message,review")

    assert [e["seq"] for e in response.json()["events"]] == [3, 4, 6]
    # alice's leave at 5 was left out, but a leave is not something to read.
    assert response.json()["read_seq"] == 6
