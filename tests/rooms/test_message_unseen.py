"""What a sender has not seen: ``latest_seq`` and ``unseen_before_send`` in the reply of a
send, ``require_read`` refusing while something from others is unread, and where a send
leaves the sender's read position (SPEC §4.2 steps 3 to 5).

Racing require_read sends are in test_room_guarantees.py.
"""

from __future__ import annotations

import pytest

from rooms.models import Message
from tests.conftest import assert_error, client_for
from tests.rooms.messaging import (
    EVENT_FIELDS,
    ROOMS,
    head_seq,
    join,
    leave,
    post,
    read,
    read_seq,
    review,
    seed_messages,
    send,
    stored_state,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("_no_rate_limits")]


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
