"""REST and MCP accept exactly the same values (SPEC §2): strict types, no
trimming, and ``null`` only where a field is documented as nullable.

Each tool with a REST twin gets the same argument, one odd value at a time,
through both doors; both must refuse it as ``validation_error`` naming the
same field, or both must let it past validation. A string is never taken
for a boolean or a number, ``" bob "`` is not ``bob``, and ``"to": null`` is
refused (omitting ``to`` means "next"; a null must not).
"""

from __future__ import annotations

from itertools import count

import pytest

from mailbox.models import Note
from rooms.services import message_send, room_create, room_join
from tests.conftest import client_for
from tests.doors import mcp_result
from tests.factories import SessionFactory
from tests.searching import search_mcp, search_rest

pytestmark = pytest.mark.django_db

ODD_VALUES = [None, True, "true", 1, 1.5, "", " bob ", [], {}]
_unique = count()


@pytest.fixture
def world(workspace):
    alice = SessionFactory(workspace=workspace, name="alice")
    SessionFactory(workspace=workspace, name="bob")
    room_create(alice, slug="lab")
    message = message_send(alice, "lab", body="hello").message
    return {"alice": alice, "message": message.public_id}


def _tools(world):
    """Each tool's REST path and arguments that pass validation."""
    return {
        "leave_note": ("/api/v1/notes/", {"body": "hi", "to": "bob"}),
        "send_message": ("/api/v1/rooms/lab/messages/", {"body": "hi"}),
        "create_room": ("/api/v1/rooms/", {"slug": "room"}),
        "join_room": ("/api/v1/rooms/lab/join", {}),
        "review_message": (
            f"/api/v1/rooms/lab/messages/{world['message']}/reviews/",
            {"verdict": "comment"},
        ),
        "mark_read": ("/api/v1/rooms/lab/read", {"seq": 1}),
    }


def _fresh(tool: str, arguments: dict, field: str) -> dict:
    """A room slug of its own for each door, unless the slug is what is checked."""
    if tool == "create_room" and field != "slug":
        return {**arguments, "slug": f"room-{next(_unique)}"}
    return arguments


def _path_arguments(tool: str, world) -> dict:
    arguments = {"room": "lab"} if tool not in ("leave_note", "create_room") else {}
    if tool == "review_message":
        arguments["message_id"] = world["message"]
    return arguments


def _outcome(status: int, body: dict) -> tuple:
    error = body.get("error") or {}
    if error.get("code") == "validation_error":
        return ("validation_error", sorted(error.get("details", {})))
    return ("past validation",)


def _rest(session, path: str, arguments: dict) -> tuple:
    response = client_for(session).post(path, arguments, format="json")
    return _outcome(response.status_code, response.json())


def _mcp(session, tool: str, arguments: dict) -> tuple:
    result = mcp_result(session.raw_token, tool, arguments)
    return _outcome(200, result["structuredContent"] if result["isError"] else {})


def _cases():
    fields = {
        "leave_note": ["body", "to", "conversation_id", "idempotency_key"],
        "send_message": ["body", "reply_to", "idempotency_key", "after_seq", "require_read"],
        "create_room": ["slug", "title", "topic", "display_name"],
        "join_room": ["display_name"],
        "review_message": ["verdict", "body"],
        "mark_read": ["seq"],
    }
    for tool, names in fields.items():
        for field in names:
            for value in ODD_VALUES:
                yield pytest.param(tool, field, value, id=f"{tool}-{field}-{value!r}")


@pytest.mark.parametrize(("tool", "field", "value"), list(_cases()))
def test_rest_and_mcp_accept_the_same_values(world, tool, field, value):
    path, valid = _tools(world)[tool]
    arguments = {**valid, field: value}
    alice = world["alice"]

    by_rest = _rest(alice, path, _fresh(tool, arguments, field))
    by_mcp = _mcp(alice, tool, {**_path_arguments(tool, world), **_fresh(tool, arguments, field)})

    assert by_rest == by_mcp


@pytest.mark.parametrize("door", ["rest", "mcp"])
def test_a_null_recipient_is_refused_and_nothing_is_stored(world, door):
    arguments = {"body": "to whom?", "to": None}
    if door == "rest":
        outcome = _rest(world["alice"], "/api/v1/notes/", arguments)
    else:
        outcome = _mcp(world["alice"], "leave_note", arguments)

    assert outcome == ("validation_error", ["to"])
    assert not Note.objects.filter(body="to whom?").exists()


@pytest.mark.parametrize("door", ["rest", "mcp"])
def test_a_string_is_not_a_boolean(world, door):
    arguments = {"body": "status: green", "require_read": "true"}
    if door == "rest":
        outcome = _rest(world["alice"], "/api/v1/rooms/lab/messages/", arguments)
    else:
        outcome = _mcp(world["alice"], "send_message", {"room": "lab", **arguments})

    assert outcome == ("validation_error", ["require_read"])


def test_a_name_is_not_trimmed(world):
    response = client_for(world["alice"]).post(
        "/api/v1/notes/", {"body": "hi", "to": " bob "}, format="json"
    )

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "recipient_not_found"


def test_a_read_position_in_a_query_string_takes_the_words(world):
    room_join(SessionFactory(workspace=world["alice"].workspace, name="carol"), "lab")
    client = client_for(world["alice"])

    assert client.get("/api/v1/rooms/lab/messages/?mark_read=false").status_code == 200
    response = client.get("/api/v1/rooms/lab/messages/?mark_read=1")
    assert response.status_code == 400


# --- search: a query string on REST, typed arguments on MCP ---------------------------
# A query string holds only text, so REST reads "5" as the number 5 where the tool
# takes only 5; every other value is refused alike, by the same field or as the same
# malformed query.
SEARCH_CASES = [
    ("q", "", ""),
    ("q", '"open', '"open'),
    ("room", "Lab", "Lab"),
    ("room", "", ""),
    ("from", " bob ", " bob "),
    ("from", "", ""),
    ("after", "yesterday", "yesterday"),
    ("before", "2024-13-01", "2024-13-01"),
    ("limit", "0", 0),
    ("limit", "101", 101),
    ("limit", "1.5", 1.5),
    ("limit", "five", "five"),
    ("cursor", "", ""),
    ("cursor", "not-a-cursor", "not-a-cursor"),
]


def _search_outcome(status: int, body: dict) -> tuple:
    error = body.get("error") or {}
    if error.get("code") == "validation_error":
        return ("validation_error", sorted(error.get("details", {})))
    if error:
        return (error["code"],)
    return ("past validation",)


@pytest.mark.parametrize(
    ("field", "rest_value", "mcp_value"),
    SEARCH_CASES,
    ids=[f"{field}-{rest!r}" for field, rest, _ in SEARCH_CASES],
)
def test_search_refuses_the_same_values_through_both_doors(world, field, rest_value, mcp_value):
    key = "author" if field == "from" else field
    base = {"q": "hello"} if field != "q" else {}

    by_rest = _search_outcome(*search_rest(world["alice"], **base, **{key: rest_value}))
    by_mcp = _search_outcome(*search_mcp(world["alice"], **base, **{key: mcp_value}))

    assert by_rest == by_mcp
    assert by_rest != ("past validation",)
