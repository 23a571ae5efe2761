"""``POST /api/v1/rooms/<slug>/messages/<id>/reviews/`` (review_message): a review event
with its own seq, its body scrubbed and limited, and the refusals of a send (SPEC §4.4)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from rooms.models import Event, Member, Room
from tests.conftest import assert_error
from tests.rooms.messaging import (
    EVENT_FIELDS,
    GITHUB_TOKEN,
    GROWING_BODY,
    GROWN_BYTES,
    REDACTED,
    create_room,
    head_seq,
    post,
    read,
    review,
    stored_state,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("_no_rate_limits")]


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
