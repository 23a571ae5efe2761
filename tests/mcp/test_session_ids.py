"""``Mcp-Session-Id``: an opaque id of its own, mapped to a session, never a credential.

A handshake-era client without ``Plumb-Name`` gets a session under a
generated name at ``initialize`` and an id that later requests carry back
with the project key. Clients and proxies log session ids, so the id must
open nothing by itself, and a token must not pass for an id (SPEC §6).
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from mailbox import credentials
from mailbox.models import AgentName, McpSession, Session
from mailbox.services import session_end
from rooms.models import Room
from tests.factories import ProjectKeyFactory, SessionFactory, WorkspaceFactory
from tests.live import no_rate_limits

pytestmark = pytest.mark.django_db

HANDSHAKE = "2025-11-25"


def post(method: str, headers: dict, params: dict | None = None):
    message = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
    return Client().post(
        "/mcp", data=json.dumps(message), content_type="application/json", headers=headers
    )


def call(name: str, arguments: dict, headers: dict):
    return post("tools/call", headers, {"name": name, "arguments": arguments})


def refusal(response) -> dict:
    """The REST error object a refused request carries in its JSON-RPC error."""
    error = response.json()["error"]
    assert error["code"] == -31000
    return error["data"]["error"]


@pytest.fixture
def key_headers(project_key, workspace) -> dict:
    """A project key and a workspace, and no Plumb-Name: initialize starts an MCP session."""
    return {"Authorization": f"Bearer {project_key.raw_key}", "Plumb-Workspace": "main"}


@pytest.fixture
def opened(key_headers) -> tuple[str, dict]:
    """An initialized MCP session: its id, and the headers its later requests carry."""
    response = post("initialize", key_headers, {"protocolVersion": HANDSHAKE})
    assert response.status_code == 200
    mcp_session_id = response["Mcp-Session-Id"]
    headers = {**key_headers, "Mcp-Session-Id": mcp_session_id, "MCP-Protocol-Version": HANDSHAKE}
    return mcp_session_id, headers


def test_initialize_gives_an_opaque_id_mapped_to_a_new_session(key_headers):
    response = post("initialize", key_headers, {"protocolVersion": HANDSHAKE})

    assert response.status_code == 200
    mcp_session_id = response["Mcp-Session-Id"]
    session = Session.objects.get()
    assert McpSession.objects.get(public_id=mcp_session_id).session == session
    assert credentials.parse(mcp_session_id) is None  # not shaped like any plumb credential
    assert not credentials.matches(mcp_session_id, session.token_hash)
    # The session's token went nowhere: not in the headers, not in the body.
    assert "plumb_tok_" not in response.content.decode()
    assert not any("plumb_tok_" in value for value in response.headers.values())


def test_every_initialize_gets_its_own_id_and_session(key_headers):
    first = post("initialize", key_headers, {"protocolVersion": HANDSHAKE})
    second = post("initialize", key_headers, {"protocolVersion": HANDSHAKE})

    assert first["Mcp-Session-Id"] != second["Mcp-Session-Id"]
    assert Session.objects.count() == 2
    assert McpSession.objects.count() == 2


def test_requests_carrying_the_id_act_as_its_session(opened):
    mcp_session_id, headers = opened
    session = McpSession.objects.get(public_id=mcp_session_id).session

    started = call("session_start", {}, headers).json()["result"]
    created = call("create_room", {"slug": "scratch"}, headers).json()["result"]

    assert started["isError"] is False
    assert started["structuredContent"]["session"]["id"] == session.public_id
    assert started["structuredContent"]["token"] is None  # initialize started it
    assert created["isError"] is False
    assert created["structuredContent"]["event"]["actor"]["handle"] == session.name.handle
    assert Room.objects.get(slug="scratch").members.get().name_id == session.name_id
    assert Session.objects.count() == 1


@pytest.mark.parametrize("door", ["rest", "mcp"])
def test_the_id_is_not_a_bearer_token(door, opened, api_client):
    mcp_session_id, _ = opened
    bearer = {"Authorization": f"Bearer {mcp_session_id}"}
    session = Session.objects.get()

    if door == "rest":
        response = api_client.get("/api/v1/sessions/current/", headers=bearer)
        code = response.json()["error"]["code"]
    else:
        response = call("list_rooms", {}, {**bearer, "Mcp-Session-Id": mcp_session_id})
        code = refusal(response)["code"]

    assert response.status_code == 401
    assert code == "invalid_token"
    assert Session.objects.get().last_seen_at == session.last_seen_at


def test_the_id_without_the_project_key_opens_nothing(opened):
    mcp_session_id, _ = opened

    response = call("list_rooms", {}, {"Mcp-Session-Id": mcp_session_id})

    assert response.status_code == 401
    assert refusal(response)["code"] == "not_authenticated"


def test_a_session_token_is_not_a_session_id(project_key, key_headers, agent_session):
    headers = {**key_headers, "Mcp-Session-Id": agent_session.raw_token}

    response = call("list_rooms", {}, headers)

    assert response.status_code == 404
    assert refusal(response)["code"] == "invalid_token"
    assert Session.objects.get().last_seen_at == agent_session.last_seen_at


def test_an_unknown_id_answers_404_so_the_client_initializes_again(key_headers):
    headers = {**key_headers, "Mcp-Session-Id": "mcp_aaaaaaaaaaaaaaaaaaaaaaaa"}

    response = post("tools/list", headers)

    assert response.status_code == 404
    assert refusal(response)["code"] == "invalid_token"


def test_an_id_of_another_project_answers_404(key_headers):
    elsewhere = WorkspaceFactory(slug="main")
    other_key = ProjectKeyFactory(project=elsewhere.project)
    foreign = post(
        "initialize",
        {"Authorization": f"Bearer {other_key.raw_key}", "Plumb-Workspace": "main"},
        {"protocolVersion": HANDSHAKE},
    )["Mcp-Session-Id"]

    response = post("tools/list", {**key_headers, "Mcp-Session-Id": foreign})

    assert response.status_code == 404
    assert refusal(response)["code"] == "invalid_token"


def test_ending_the_session_ends_its_id(opened):
    _, headers = opened
    session = Session.objects.get()

    session_end(session)  # what the admin's "end session" does
    response = call("list_rooms", {}, headers)

    assert response.status_code == 404
    assert refusal(response)["code"] == "session_ended"
    assert Session.objects.get().ended_at is not None
    assert Session.objects.count() == 1  # nothing started in its place


def test_an_expired_session_id_answers_404_session_expired(opened, settings):
    _, headers = opened
    stale = timezone.now() - timedelta(seconds=settings.PLUMB_SESSION_TTL + 1)
    Session.objects.update(last_seen_at=stale)

    response = call("list_rooms", {}, headers)

    assert response.status_code == 404
    assert refusal(response)["code"] == "session_expired"
    assert Session.objects.get().last_seen_at == stale


def test_initializing_again_and_again_without_a_name_does_not_use_up_names(key_headers, settings):
    """Each initialize without Plumb-Name takes a generated name; once its session
    has expired, the next initialize frees it, so the names in use stay few
    however long a client keeps reconnecting."""
    no_rate_limits(settings)
    ids = []
    for _ in range(12):
        response = post("initialize", key_headers, {"protocolVersion": HANDSHAKE})
        assert response.status_code == 200
        ids.append(response["Mcp-Session-Id"])
        assert AgentName.objects.count() == 1
        # The client goes away without a word; its session expires.
        stale = timezone.now() - timedelta(seconds=settings.PLUMB_SESSION_TTL + 1)
        Session.objects.update(last_seen_at=stale)

    assert len(set(ids)) == 12
    assert Session.objects.count() == McpSession.objects.count() == 1
    # A freed session's id is unknown now: 404, and the client initializes again.
    headers = {**key_headers, "Mcp-Session-Id": ids[0], "MCP-Protocol-Version": HANDSHAKE}
    response = post("tools/list", headers)
    assert response.status_code == 404
    assert refusal(response)["code"] == "invalid_token"


def test_a_named_connection_ignores_a_session_id(opened, key_headers):
    mcp_session_id, _ = opened
    headers = {**key_headers, "Plumb-Name": "alice", "Mcp-Session-Id": mcp_session_id}

    result = call("session_start", {}, headers).json()["result"]["structuredContent"]

    assert result["session"]["name"] == "alice"
    assert Session.objects.count() == 2


def test_a_session_token_connection_ignores_a_session_id(opened):
    mcp_session_id, _ = opened
    carol = SessionFactory(workspace=Session.objects.get().workspace, name="carol")
    headers = {"Authorization": f"Bearer {carol.raw_token}", "Mcp-Session-Id": mcp_session_id}

    result = call("session_start", {}, headers).json()["result"]["structuredContent"]

    assert result["session"]["id"] == carol.public_id


def test_initialize_in_an_unknown_workspace_starts_nothing(project_key, workspace):
    headers = {"Authorization": f"Bearer {project_key.raw_key}", "Plumb-Workspace": "nowhere"}

    response = post("initialize", headers, {"protocolVersion": HANDSHAKE})

    assert response.status_code == 404
    assert refusal(response)["code"] == "workspace_not_found"
    assert "Mcp-Session-Id" not in response
    assert not Session.objects.exists()
    assert not McpSession.objects.exists()


def test_a_request_by_id_finds_its_session_in_one_query(opened, django_assert_num_queries):
    _, headers = opened
    post("ping", headers)  # the key's last use is recorded once a minute, not on every call

    with django_assert_num_queries(2):  # the project key; the session with its pending notes
        response = post("ping", headers)

    assert response.status_code == 200
