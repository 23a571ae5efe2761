"""A project key with ``Plumb-Name``, the README's configuration: found in one query.

Every tool call of such a client looks up its key and the open session of its
name together (``plumb_site.mcp.identity``), with whether notes wait, so a
call costs the queries its REST twin costs and the key is refused as alone.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from mailbox.models import Session
from mailbox.services import key_revoke, note_leave
from rooms.services import room_create, room_join
from tests.factories import SessionFactory
from tests.mcp.conftest import agent_headers

pytestmark = pytest.mark.django_db

BODY = "The build is green; the flaky import test is behind the slow marker now."


@pytest.fixture
def alice(workspace):
    """The session the MCP client acts as (started by another key of the project)."""
    return SessionFactory(workspace=workspace, name="alice")


@pytest.fixture
def headers(project_key):
    return agent_headers(project_key.raw_key)


def call(name: str, arguments: dict, headers: dict):
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }
    return Client().post(
        "/mcp", data=json.dumps(message), content_type="application/json", headers=headers
    )


def result_of(response) -> dict:
    assert response.status_code == 200, response.content
    result = response.json()["result"]
    assert result["isError"] is False, result
    return result["structuredContent"]


def refusal_code(response) -> str:
    assert response.status_code == 401
    return response.json()["error"]["data"]["error"]["code"]


def test_check_messages_with_nothing_pending_is_one_query(
    alice, headers, django_assert_num_queries
):
    result_of(call("check_messages", {}, headers))  # records the key's first use

    with django_assert_num_queries(1):  # the key with the session and whether notes wait
        assert result_of(call("check_messages", {}, headers))["notes"] == []


def test_session_start_resumes_the_named_session_without_looking_it_up_again(
    alice, headers, django_assert_num_queries
):
    result_of(call("check_messages", {}, headers))  # records the key's first use

    with django_assert_num_queries(1):
        resumed = result_of(call("session_start", {}, headers))

    assert (resumed["session"]["id"], resumed["token"]) == (alice.public_id, None)


def test_a_pending_note_still_rides_on_the_next_result(alice, headers, workspace):
    bob = SessionFactory(workspace=workspace, name="bob")
    note_leave(bob, body=BODY, to="alice")

    notes = result_of(call("list_rooms", {}, headers))["notes"]

    assert [note["body"] for note in notes] == [BODY]
    assert result_of(call("list_rooms", {}, headers))["notes"] == []


def rest(session, method: str, path: str, body: dict | None = None):
    auth = {"Authorization": f"Bearer {session.raw_token}"}
    if body is None:
        return Client().generic(method, path, headers=auth)
    return Client().generic(
        method, path, json.dumps(body), content_type="application/json", headers=auth
    )


@pytest.mark.parametrize(
    ("tool", "arguments", "method", "path"),
    [
        ("check_messages", {}, "GET", "/api/v1/notes/"),
        ("leave_note", {"to": "bob", "body": BODY}, "POST", "/api/v1/notes/"),
        ("send_message", {"room": "plan", "body": BODY}, "POST", "/api/v1/rooms/plan/messages/"),
    ],
)
def test_a_tool_call_costs_the_queries_of_its_rest_call(
    tool, arguments, method, path, alice, headers, workspace
):
    carol = SessionFactory(workspace=workspace, name="carol")  # the REST twin
    SessionFactory(workspace=workspace, name="bob")
    room_create(carol, slug="plan", title="Plan")
    room_join(alice, "plan")
    rest_body = {k: v for k, v in arguments.items() if k != "room"} or None
    for _ in range(2):  # first uses: key and session touches, compiled queries
        assert rest(carol, method, path, rest_body).status_code < 300
        result_of(call(tool, arguments, headers))

    with CaptureQueriesContext(connection) as over_rest:
        assert rest(carol, method, path, rest_body).status_code < 300
    with CaptureQueriesContext(connection) as over_mcp:
        result_of(call(tool, arguments, headers))

    assert len(over_mcp) == len(over_rest)


def test_a_revoked_key_is_refused_while_the_name_has_an_open_session(alice, headers, project_key):
    key_revoke(project_key, actor="test")
    seen = Session.objects.get(pk=alice.pk).last_seen_at

    assert refusal_code(call("check_messages", {}, headers)) == "key_revoked"
    assert Session.objects.get(pk=alice.pk).last_seen_at == seen


def test_a_key_with_a_known_prefix_and_a_wrong_secret_is_invalid_token(alice, headers, project_key):
    raw = project_key.raw_key
    forged = raw[:-4] + ("AAAA" if not raw.endswith("AAAA") else "BBBB")
    headers["Authorization"] = f"Bearer {forged}"

    assert refusal_code(call("check_messages", {}, headers)) == "invalid_token"


def test_an_expired_session_of_the_name_is_replaced_not_acted_as(alice, headers, settings):
    stale = timezone.now() - timedelta(seconds=settings.PLUMB_SESSION_TTL + 1)
    Session.objects.filter(pk=alice.pk).update(last_seen_at=stale)

    started = result_of(call("session_start", {}, headers))

    assert started["session"]["id"] != alice.public_id
    assert started["token"] is not None
    alice.refresh_from_db()
    assert (alice.ended_at is not None, alice.end_reason) == (True, "expired")
