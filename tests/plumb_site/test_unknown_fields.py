"""Unknown body fields are refused on every endpoint that takes a JSON body (SPEC §2).

A typo such as ``requireRead`` must never post silently: the call answers
``400 validation_error`` with ``details`` naming each unknown field, and stores
nothing. Endpoints whose body has no fields of their own (leave a room, end a
session) refuse them too; ``tool_schema_fingerprint`` is known everywhere.
"""

from __future__ import annotations

import pytest

from mailbox.models import AgentName, Conversation, Note, Session
from rooms import services as room_services
from rooms.models import Event, Member, Message, Room
from tests.conftest import assert_error, client_for

pytestmark = pytest.mark.django_db

UNKNOWN = {"requireRead": True, "colour": "blue"}


@pytest.fixture(autouse=True)
def _no_rate_limits(settings):
    settings.PLUMB_RATE_SESSION = None


@pytest.fixture
def world(workspace, alice, bob):
    """bob creates ``general`` (seq 1), alice joins (seq 2) and posts (seq 3);
    bob's read position stays at 1, so a mark_read or a send would move it."""
    room_services.room_create(bob, slug="general")
    room_services.room_join(alice, "general")
    sent = room_services.message_send(alice, "general", body="hello")
    return {"message_id": sent.message.public_id}


def stored_state() -> tuple:
    """Everything any of these calls would change."""
    return (
        list(Session.objects.order_by("pk").values_list("public_id", "ended_at")),
        list(AgentName.objects.order_by("pk").values_list("handle", flat=True)),
        Conversation.objects.count(),
        list(Note.objects.order_by("pk").values_list("body", flat=True)),
        list(Room.objects.order_by("slug").values_list("slug", "head_seq")),
        list(
            Member.objects.order_by("pk").values_list(
                "room__slug", "name__handle", "read_seq", "left_at", "display_name"
            )
        ),
        list(Event.objects.order_by("pk").values_list("room__slug", "seq", "kind")),
        list(Message.objects.order_by("pk").values_list("body", flat=True)),
    )


ROOM = "/api/v1/rooms/general"

# (method, path, a valid body, who calls): the valid body alone would succeed.
BODY_ENDPOINTS = [
    pytest.param("post", "/api/v1/sessions/", {"workspace": "main"}, "key", id="session-start"),
    pytest.param("delete", "/api/v1/sessions/current/", {}, "bob", id="session-end"),
    pytest.param("post", "/api/v1/notes/", {"body": "hi", "to": "alice"}, "bob", id="leave-note"),
    pytest.param("post", "/api/v1/rooms/", {"slug": "other"}, "bob", id="create-room"),
    pytest.param("post", f"{ROOM}/join", {"display_name": "C"}, "carol", id="join-room"),
    pytest.param("post", f"{ROOM}/leave", {}, "bob", id="leave-room"),
    pytest.param("post", f"{ROOM}/messages/", {"body": "hi"}, "bob", id="send-message"),
    pytest.param("post", f"{ROOM}/read", {"seq": 3}, "bob", id="mark-read"),
    pytest.param(
        "post",
        ROOM + "/messages/{message_id}/reviews/",
        {"verdict": "approve", "body": "ok"},
        "bob",
        id="review-message",
    ),
]


def _client(request, caller: str):
    if caller == "key":
        return request.getfixturevalue("key_client")
    return client_for(request.getfixturevalue(caller))


@pytest.mark.parametrize(("method", "path", "body", "caller"), BODY_ENDPOINTS)
def test_a_body_with_unknown_fields_is_refused_naming_each_and_stores_nothing(
    request, world, method, path, body, caller
):
    client = _client(request, caller)
    before = stored_state()

    response = getattr(client, method)(
        path.format(**world), {**body, **UNKNOWN, "tool_schema_fingerprint": "x"}, format="json"
    )

    error = assert_error(response, 400, "validation_error")
    assert error["details"] == {"requireRead": ["Unknown field."], "colour": ["Unknown field."]}
    assert stored_state() == before


@pytest.mark.parametrize(("method", "path", "body", "caller"), BODY_ENDPOINTS)
def test_the_same_body_without_them_succeeds(request, world, method, path, body, caller):
    """The refusals above are for the unknown fields alone: the rest is a valid call."""
    client = _client(request, caller)
    before = stored_state()

    response = getattr(client, method)(
        path.format(**world), {**body, "tool_schema_fingerprint": "x"}, format="json"
    )

    assert response.status_code in (200, 201), response.content[:500]
    assert "schema_stale" in response.json()
    assert stored_state() != before


def test_unknown_fields_are_reported_with_the_invalid_ones(world, bob):
    response = client_for(bob).post(
        f"{ROOM}/messages/", {"body": 5, "requireRead": True}, format="json"
    )

    error = assert_error(response, 400, "validation_error")
    assert set(error["details"]) == {"body", "requireRead"}
    assert error["details"]["requireRead"] == ["Unknown field."]
    assert not Message.objects.filter(author__handle="bob").exists()


def test_a_misspelt_require_read_does_not_post_past_unread_messages(world, bob):
    """The finding of issue #14: ``requireRead`` posted as if it were absent."""
    response = client_for(bob).post(
        f"{ROOM}/messages/", {"body": "all clear", "requireRead": True}, format="json"
    )

    assert_error(response, 400, "validation_error")
    assert Room.objects.get(slug="general").head_seq == 3
    assert not Message.objects.filter(body="all clear").exists()


@pytest.mark.parametrize(
    "path", ["/api/v1/notes/", "/api/v1/rooms/general/messages/", "/api/v1/conversations/"]
)
def test_query_parameters_stay_lenient(world, bob, path):
    """SPEC §2 refuses unknown body fields; unknown query parameters are ignored."""
    response = client_for(bob).get(path, {"colour": "blue"})

    assert response.status_code == 200, response.content[:500]
