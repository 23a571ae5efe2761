"""``GET /api/v1/rooms/<slug>/messages/`` (read_messages): events after the read position,
limits, kinds filters, hidden messages, ``wait``, and how far a read moves the read
position (SPEC §4.3).

The waiting rules, with threads, are test_waiting.py.
"""

from __future__ import annotations

import time

import pytest
from django.utils import timezone

from common import limits
from rooms.models import Message
from tests.conftest import assert_error
from tests.rooms.messaging import (
    EVENT_FIELDS,
    head_seq,
    is_iso_utc,
    join,
    leave,
    mentions_of,
    post,
    read,
    read_seq,
    review,
    seed_messages,
    send,
    stored_state,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("_no_rate_limits")]


READ_FIELDS = {"events", "latest_seq", "read_seq", "has_more", "notes"}


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
        "kind": "agent",
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


# --- a filtered read and the read position ---------------------------------------------------


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
