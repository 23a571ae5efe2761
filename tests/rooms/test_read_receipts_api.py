"""``GET /api/v1/rooms/<slug>/messages/<id>/``: one message with its read receipts
(SPEC §4.3): the current members other than its author whose read position has
reached its seq (``read_by``) and those whose has not (``unread_by``)."""

from __future__ import annotations

import pytest

from rooms import services
from rooms.models import Member, Message
from tests.conftest import client_for
from tests.rooms.messaging import ROOMS, join, leave, post, read, read_seq

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("_no_rate_limits")]


def receipts(session, message_id: str, slug: str = "general"):
    return client_for(session).get(f"{ROOMS}{slug}/messages/{message_id}/")


def test_receipts_change_as_members_read(alice, bob, carol, general):
    join(carol, "general")
    message = post(alice, "release notes are up")

    first = receipts(alice, message["id"]).json()
    read(bob)
    after_bob = receipts(alice, message["id"]).json()
    client_for(carol).post(f"{ROOMS}general/read", {"seq": message["seq"]}, format="json")
    after_carol = receipts(bob, message["id"]).json()

    assert first["message"] == message
    assert (first["read_by"], first["unread_by"]) == ([], ["bob", "carol"])
    assert (after_bob["read_by"], after_bob["unread_by"]) == (["bob"], ["carol"])
    assert (after_carol["read_by"], after_carol["unread_by"]) == (["bob", "carol"], [])
    assert first["notes"] == []


def test_only_current_members_count_by_their_read_position(alice, bob, carol, general):
    message = post(alice, "before carol came")
    leave(bob)
    # A member who joins starts caught up: her read position is past the message.
    join(carol, "general")

    body = receipts(alice, message["id"]).json()

    assert (body["read_by"], body["unread_by"]) == (["carol"], [])
    Member.objects.filter(name=carol.name).update(read_seq=message["seq"] - 1)
    assert receipts(alice, message["id"]).json()["unread_by"] == ["carol"]


def test_reading_receipts_moves_no_read_position(alice, bob, general):
    message = post(alice, "hello")
    before = read_seq(bob)

    assert receipts(bob, message["id"]).status_code == 200

    assert read_seq(bob) == before


def test_a_hidden_message_shows_no_body(alice, bob, general):
    message = post(alice, "oops")
    services.message_hide(
        Message.objects.get(public_id=message["id"]), actor="admin:test", reason="by mistake"
    )

    body = receipts(bob, message["id"]).json()

    assert (body["message"]["hidden"], body["message"]["body"]) == (True, None)


@pytest.mark.parametrize(
    ("who", "path", "status", "code"),
    [
        ("carol", "general/messages/{id}", 403, "not_a_member"),
        ("bob", "general/messages/msg_nosuch", 404, "message_not_found"),
        ("bob", "elsewhere/messages/{id}", 404, "message_not_found"),
        ("bob", "nowhere/messages/{id}", 404, "room_not_found"),
    ],
)
def test_refusals(alice, bob, carol, general, who, path, status, code):
    message = post(alice, "members only")
    services.room_create(bob, slug="elsewhere")
    session = {"bob": bob, "carol": carol}[who]

    response = client_for(session).get(f"{ROOMS}{path.format(id=message['id'])}/")

    assert response.status_code == status
    assert response.json()["error"]["code"] == code


def test_receipts_cost_three_queries_after_authentication(
    alice, bob, carol, general, settings, django_assert_num_queries
):
    settings.PLUMB_SEEN_WRITE_INTERVAL = 3600
    join(carol, "general")
    message = post(alice, "count me")
    client = client_for(bob)

    # Authentication; the room with bob's membership; the message; the members.
    with django_assert_num_queries(4):
        response = client.get(f"{ROOMS}general/messages/{message['id']}/")

    assert response.json()["unread_by"] == ["bob", "carol"]
