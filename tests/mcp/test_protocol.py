"""The HTTP and JSON-RPC edges of POST /mcp, with raw requests (issue 8, point 1).

Each test sends exactly the bytes and headers a misbehaving (or merely
unusual) client would, and checks the status, the JSON-RPC error code and
that nothing changed in the database.
"""

from __future__ import annotations

import base64
import json

import pytest
from django.test import Client

from mailbox.models import AgentName, Session
from mailbox.services import key_revoke, mcp_session_open
from plumb_site.mcp.protocol import SUPPORTED_VERSIONS
from rooms.models import Member, Room
from tests.conftest import client_for
from tests.factories import SessionFactory, WorkspaceFactory
from tests.framing import says_the_same
from tests.mcp.conftest import BINDING_TOOL_NAMES

pytestmark = pytest.mark.django_db

MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}


@pytest.fixture
def headers(project_key):
    return {
        "Authorization": f"Bearer {project_key.raw_key}",
        "Plumb-Workspace": "main",
        "Plumb-Name": "alice",
    }


def post(body, headers=None, *, raw: bool = False, content_type: str = "application/json"):
    data = body if raw else json.dumps(body)
    return Client().post("/mcp", data=data, content_type=content_type, headers=headers or {})


def rpc(method: str, params: dict | None = None, request_id: int = 1) -> dict:
    message = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def modern(method: str, params: dict | None = None, headers: dict | None = None, **overrides):
    """A well-formed stateless-era request; ``overrides`` replace (or, None, drop) headers."""
    body = rpc(method, {**(params or {}), "_meta": META})
    sent = {**(headers or {}), "MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    if method == "tools/call":
        sent["Mcp-Name"] = body["params"]["name"]
    for name, value in overrides.items():
        name = name.replace("_", "-")
        if value is None:
            sent.pop(name, None)
        else:
            sent[name] = value
    return post(body, sent)


def error_of(response) -> dict:
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert body["jsonrpc"] == "2.0"
    return body["error"]


# --- HTTP -------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["get", "delete", "put"])
def test_anything_but_post_is_not_allowed(method, headers):
    response = getattr(Client(), method)("/mcp", headers=headers)

    assert response.status_code == 405
    assert response["Allow"] == "POST"
    assert error_of(response)["code"] == -32600


def test_a_foreign_origin_is_forbidden_before_anything_happens(project_key, workspace):
    headers = {
        "Authorization": f"Bearer {project_key.raw_key}",
        "Plumb-Workspace": "main",
        "Origin": "http://evil.example",
    }

    response = post(rpc("initialize", {"protocolVersion": "2025-11-25"}), headers)

    assert response.status_code == 403
    assert "id" not in response.json()
    assert error_of(response)["code"] == -32600
    assert not Session.objects.exists()


@pytest.mark.parametrize(
    "origin", [None, "http://localhost:3000", "http://127.0.0.1:8000", "https://[::1]:5173"]
)
def test_local_pages_and_non_browsers_may_call(origin, headers):
    if origin is not None:
        headers["Origin"] = origin

    response = post(rpc("ping"), headers)

    assert response.status_code == 200
    assert response.json() == {"jsonrpc": "2.0", "id": 1, "result": {}}


@pytest.mark.parametrize(
    "origin", ["null", "http://localhost.evil.example", "http://127.0.0.1:notaport", "file://"]
)
def test_look_alike_and_opaque_origins_are_forbidden(origin, headers):
    response = post(rpc("ping"), {**headers, "Origin": origin})

    assert response.status_code == 403


def test_an_origin_the_operator_trusts_may_call(headers, settings):
    settings.CSRF_TRUSTED_ORIGINS = ["https://console.example.com"]

    response = post(rpc("ping"), {**headers, "Origin": "https://console.example.com"})

    assert response.status_code == 200


def test_a_batch_is_refused(headers):
    response = post([rpc("ping", request_id=1), rpc("ping", request_id=2)], headers)

    assert response.status_code == 400
    assert error_of(response)["code"] == -32600


@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}},
        {"jsonrpc": "2.0", "id": 7, "result": {}},
        {"jsonrpc": "2.0", "id": 7, "error": {"code": -1, "message": "no"}},
    ],
)
def test_notifications_and_responses_are_accepted_with_an_empty_body(message):
    response = post(message)

    assert response.status_code == 202
    assert response.content == b""


@pytest.mark.parametrize(
    "raw",
    [
        b"{",
        b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "x": NaN}',
        b"\xff\xfe",
        b" ",
        b"[" * 100 + b"]" * 100,
    ],
)
def test_malformed_json_is_a_parse_error(raw, headers):
    response = post(raw, headers, raw=True)

    assert response.status_code == 400
    assert error_of(response)["code"] == -32700
    assert "id" not in response.json()


@pytest.mark.parametrize(
    "message",
    [
        {"id": 1, "method": "ping"},
        {"jsonrpc": "1.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "id": None, "method": "ping"},
        {"jsonrpc": "2.0", "id": 1.5, "method": "ping"},
        {"jsonrpc": "2.0", "id": 1, "method": 5},
        {"jsonrpc": "2.0", "id": 1},
        "ping",
    ],
)
def test_what_is_not_a_json_rpc_message_is_an_invalid_request(message, headers):
    response = post(message, headers)

    assert response.status_code == 400
    assert error_of(response)["code"] == -32600


def test_a_body_over_the_size_limit_is_refused(headers, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024
    message = rpc("tools/call", {"name": "check_messages", "arguments": {"x": "y" * 2000}})

    response = post(message, headers)

    assert response.status_code == 413
    assert error_of(response)["code"] == -32600
    assert not Session.objects.exists()


@pytest.mark.parametrize("content_type", ["text/plain", "application/json; charset=latin-1"])
def test_a_body_that_is_not_utf8_json_is_refused(content_type, headers):
    response = post(rpc("ping"), headers, content_type=content_type)

    assert response.status_code == 415
    assert error_of(response)["code"] == -32600


def test_the_path_takes_an_optional_trailing_slash(headers):
    response = Client().post(
        "/mcp/", data=json.dumps(rpc("ping")), content_type="application/json", headers=headers
    )

    assert response.status_code == 200


# --- the handshake era ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requested", "answered"),
    [
        ("2025-06-18", "2025-06-18"),
        ("2024-11-05", "2024-11-05"),
        ("2025-11-25", "2025-11-25"),
        ("1999-01-01", "2025-11-25"),
        (MODERN, "2025-11-25"),
    ],
)
def test_initialize_negotiates_a_handshake_version(requested, answered, headers):
    response = post(rpc("initialize", {"protocolVersion": requested, "capabilities": {}}), headers)

    assert response.status_code == 200
    result = response.json()["result"]
    assert result["protocolVersion"] == answered
    assert result["capabilities"] == {"tools": {"listChanged": False}}
    assert result["serverInfo"]["name"] == "plumb"
    # A named connection needs no MCP session: every request says who it is
    # (tests/mcp/test_session_ids.py has the connections that do).
    assert "Mcp-Session-Id" not in response
    assert not Session.objects.exists()


def test_initialize_without_a_name_or_workspace_is_refused(project_key, workspace):
    headers = {"Authorization": f"Bearer {project_key.raw_key}"}

    response = post(rpc("initialize", {"protocolVersion": "2025-11-25"}), headers)

    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == -31000
    assert error["data"]["error"]["code"] == "validation_error"
    assert "Plumb-Workspace" in error["data"]["error"]["details"]
    assert not Session.objects.exists()


def test_an_unsupported_version_header_is_refused_in_the_handshake_era(headers):
    response = post(rpc("tools/list"), {**headers, "MCP-Protocol-Version": "1999-01-01"})

    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == -32022
    assert error["data"] == {"supported": list(SUPPORTED_VERSIONS), "requested": "1999-01-01"}


def test_an_unknown_method_in_the_handshake_era_is_method_not_found(headers):
    response = post(rpc("resources/list"), {**headers, "MCP-Protocol-Version": "2025-11-25"})

    assert response.status_code == 200
    assert error_of(response)["code"] == -32601


def test_the_handshake_era_tool_list_has_no_stateless_fields(headers):
    result = post(rpc("tools/list"), headers).json()["result"]

    assert {"tools", "_meta"} == set(result)


# --- the stateless era ----------------------------------------------------------------------


def test_server_discover_names_the_versions_and_caching_hints(headers):
    response = modern("server/discover", headers=headers)

    assert response.status_code == 200
    result = response.json()["result"]
    assert result["supportedVersions"] == list(SUPPORTED_VERSIONS)
    assert result["capabilities"] == {"tools": {"listChanged": False}}
    assert result["resultType"] == "complete"
    assert result["ttlMs"] > 0
    assert result["cacheScope"] == "public"
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "plumb"


def test_the_stateless_tool_list_is_cacheable(headers):
    result = modern("tools/list", headers=headers).json()["result"]

    assert result["resultType"] == "complete"
    assert result["ttlMs"] > 0
    assert result["cacheScope"] == "public"
    assert len(result["tools"]) == len(BINDING_TOOL_NAMES)


def test_stateless_tool_results_say_they_are_complete(headers, workspace):
    response = modern("tools/call", {"name": "list_rooms", "arguments": {}}, headers=headers).json()

    assert response["result"]["resultType"] == "complete"
    assert response["result"]["structuredContent"] == {"rooms": [], "has_more": False, "notes": []}


@pytest.mark.parametrize(
    "overrides",
    [
        {"MCP_Protocol_Version": None},
        {"MCP_Protocol_Version": "2025-11-25"},
        {"Mcp_Method": None},
        {"Mcp_Method": "tools/list"},
        {"Mcp_Name": None},
        {"Mcp_Name": "send_message"},
        {"Mcp_Name": "=?base64?not base64?="},
    ],
)
def test_headers_that_disagree_with_the_body_are_a_header_mismatch(overrides, headers, workspace):
    response = modern("tools/call", {"name": "list_rooms", "arguments": {}}, headers, **overrides)

    assert response.status_code == 400
    assert error_of(response)["code"] == -32020
    assert response.json()["id"] == 1
    assert not Session.objects.exists()


def test_a_version_header_without_meta_is_a_header_mismatch(headers):
    response = post(
        rpc("tools/list"), {**headers, "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"}
    )

    assert response.status_code == 400
    assert error_of(response)["code"] == -32020


def test_a_base64_encoded_tool_name_is_decoded_before_comparing(headers, workspace):
    encoded = "=?base64?" + base64.b64encode(b"list_rooms").decode() + "?="

    response = modern("tools/call", {"name": "list_rooms"}, headers, Mcp_Name=encoded)

    assert response.status_code == 200
    assert response.json()["result"]["isError"] is False


@pytest.mark.parametrize("version", ["2099-01-01", "2025-11-25"])
def test_an_unsupported_stateless_version_is_refused_with_the_supported_list(version, headers):
    body = rpc(
        "tools/list", {"_meta": {**META, "io.modelcontextprotocol/protocolVersion": version}}
    )
    sent = {**headers, "MCP-Protocol-Version": version, "Mcp-Method": "tools/list"}

    response = post(body, sent)

    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == -32022
    assert error["data"]["supported"] == list(SUPPORTED_VERSIONS)
    assert error["data"]["requested"] == version


def test_an_unsupported_header_is_reported_before_a_mismatch(headers):
    sent = {**headers, "MCP-Protocol-Version": "2099-01-01", "Mcp-Method": "tools/list"}

    response = post(rpc("tools/list", {"_meta": META}), sent)

    assert error_of(response)["code"] == -32022


@pytest.mark.parametrize("method", ["resources/list", "ping", "initialize-ish"])
def test_an_unknown_stateless_method_is_404_method_not_found(method, headers):
    response = modern(method, headers=headers)

    assert response.status_code == 404
    assert error_of(response)["code"] == -32601


# --- tool calls, credentials and identity -----------------------------------------------------


def call(name: str, arguments, headers: dict):
    return post(rpc("tools/call", {"name": name, "arguments": arguments}), headers)


def test_an_unknown_tool_is_invalid_params(headers):
    response = call("drop_tables", {}, headers)

    assert response.status_code == 200
    assert error_of(response)["code"] == -32602


@pytest.mark.parametrize("arguments", [[], "x", 3])
def test_arguments_must_be_an_object(arguments, headers):
    assert error_of(call("list_rooms", arguments, headers))["code"] == -32602


@pytest.mark.parametrize(
    ("authorization", "code"),
    [(None, "not_authenticated"), ("Bearer nope", "invalid_token"), ("Token x", "invalid_token")],
)
def test_a_request_without_a_good_credential_is_401_with_the_rest_code(
    authorization, code, headers
):
    if authorization is None:
        del headers["Authorization"]
    else:
        headers["Authorization"] = authorization

    response = post(rpc("tools/list"), headers)

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="plumb"'
    error = error_of(response)
    assert error["code"] == -31000
    assert error["data"]["error"]["code"] == code


def test_a_revoked_key_is_refused(headers, project_key):
    key_revoke(project_key, actor="test")

    response = call("list_rooms", {}, headers)

    assert response.status_code == 401
    assert error_of(response)["data"]["error"]["code"] == "key_revoked"
    assert not Session.objects.exists()


def test_an_implicit_session_records_its_key_and_ends_with_it(headers, project_key):
    started = call("session_start", {}, headers).json()["result"]["structuredContent"]
    session = Session.objects.get(public_id=started["session"]["id"])
    assert session.project_key_id == project_key.pk

    assert key_revoke(project_key, actor="test") == 1

    # Its token is refused with the reason, on MCP as on REST.
    response = call("list_rooms", {}, {"Authorization": f"Bearer {started['token']}"})
    assert response.status_code == 401
    assert error_of(response)["data"]["error"]["code"] == "key_revoked"
    session.refresh_from_db()
    assert (session.ended_at is not None, session.end_reason) == (True, "key_revoked")


def test_a_session_token_acts_as_that_session(agent_session):
    headers = {"Authorization": f"Bearer {agent_session.raw_token}"}

    result = call("session_start", {}, headers).json()["result"]["structuredContent"]

    assert result["session"]["id"] == agent_session.public_id
    assert result["token"] is None


def test_the_rate_limit_applies_to_the_acting_session(headers, workspace, settings):
    settings.PLUMB_RATE_SESSION = "2/m"

    statuses = [call("list_rooms", {}, headers).status_code for _ in range(3)]

    assert statuses == [200, 200, 429]
    refused = call("list_rooms", {}, headers)
    assert int(refused["Retry-After"]) > 0
    assert error_of(refused)["data"]["error"]["code"] == "throttled"


def tool_error(response) -> dict:
    result = response.json()["result"]
    assert result["isError"] is True
    assert says_the_same(result["content"][0]["text"], result["structuredContent"])
    return result["structuredContent"]["error"]


def test_a_project_key_without_a_name_cannot_act_in_the_stateless_era(headers, workspace):
    del headers["Plumb-Name"]

    response = modern("tools/call", {"name": "list_rooms", "arguments": {}}, headers)

    assert tool_error(response)["details"] == {"Plumb-Name": ["Required with a project key."]}
    assert not Session.objects.exists()


@pytest.mark.parametrize(
    ("changes", "code", "field"),
    [
        ({"Plumb-Workspace": None}, "validation_error", "Plumb-Workspace"),
        ({"Plumb-Workspace": "Not A Slug"}, "validation_error", "Plumb-Workspace"),
        ({"Plumb-Name": "Alice!"}, "validation_error", "Plumb-Name"),
        ({"Plumb-Name": "next"}, "validation_error", "Plumb-Name"),
        ({"Plumb-Workspace": "nowhere"}, "workspace_not_found", None),
    ],
)
def test_identity_headers_that_name_no_session_are_error_results(
    changes, code, field, headers, workspace
):
    for name, value in changes.items():
        headers.pop(name)
        if value is not None:
            headers[name] = value

    error = tool_error(call("list_rooms", {}, headers))

    assert error["code"] == code
    if field:
        assert field in error["details"]
    assert not Session.objects.exists()
    assert not AgentName.objects.exists()


def test_a_name_bound_to_another_workspace_is_name_taken(headers, workspace, project):
    SessionFactory(workspace=WorkspaceFactory(project=project, slug="other"), name="alice")

    assert tool_error(call("list_rooms", {}, headers))["code"] == "name_taken"


def test_a_connected_session_of_the_name_is_acted_as_not_replaced(headers, workspace):
    alice = SessionFactory(workspace=workspace, name="alice")

    result = call("session_start", {}, headers).json()["result"]["structuredContent"]

    assert result["session"]["id"] == alice.public_id
    assert result["token"] is None
    assert Session.objects.count() == 1


@pytest.mark.parametrize("arguments", [{"name": "bob"}, {"workspace": "other"}])
def test_session_start_arguments_must_agree_with_the_headers(arguments, headers, workspace):
    error = tool_error(call("session_start", arguments, headers))

    assert error["code"] == "validation_error"
    assert set(error["details"]) == set(arguments)
    assert not Session.objects.exists()


def test_session_start_arguments_fill_in_missing_headers(project_key, workspace):
    headers = {"Authorization": f"Bearer {project_key.raw_key}"}

    result = call("session_start", {"workspace": "main", "name": "carol"}, headers).json()

    content = result["result"]["structuredContent"]
    assert content["session"]["name"] == "carol"
    assert content["token"].startswith("plumb_tok_")


def test_session_start_refuses_the_reserved_name_next_as_an_argument(project_key, workspace):
    headers = {"Authorization": f"Bearer {project_key.raw_key}"}

    error = tool_error(call("session_start", {"workspace": "main", "name": "next"}, headers))

    assert error["code"] == "validation_error"
    assert set(error["details"]) == {"name"}
    assert not Session.objects.exists()
    assert not AgentName.objects.exists()


def test_a_stale_fingerprint_is_reported_on_results_and_errors(headers, workspace):
    stale = {"tool_schema_fingerprint": "0000"}

    ok = call("list_rooms", stale, headers).json()["result"]["structuredContent"]
    failed = call("join_room", {"room": "nowhere", **stale}, headers).json()["result"]
    by_header = call("list_rooms", {}, {**headers, "Plumb-Schema-Fingerprint": "0000"})

    from common.schema import schema_fingerprint

    assert ok["schema_stale"] == {"current": schema_fingerprint()}
    assert failed["structuredContent"]["schema_stale"] == {"current": schema_fingerprint()}
    assert by_header.json()["result"]["structuredContent"]["schema_stale"]["current"]
    current = {"tool_schema_fingerprint": schema_fingerprint()}
    assert (
        "schema_stale"
        not in call("list_rooms", current, headers).json()["result"]["structuredContent"]
    )


@pytest.mark.parametrize(
    ("tool", "arguments", "field"),
    [
        ("leave_note", {}, "body"),
        ("leave_note", {"body": 5}, "body"),
        ("leave_note", {"body": "x", "to": ""}, "to"),
        ("check_messages", {"wait": 31}, "wait"),
        ("check_messages", {"wait": "5"}, "wait"),
        ("list_conversations", {"limit": 0}, "limit"),
        ("read_conversation", {"conversation_id": "../x"}, "conversation_id"),
        ("create_room", {"slug": "Has Spaces"}, "slug"),
        ("create_room", {"slug": "ok\n"}, "slug"),
        ("join_room", {"room": "dev", "display_name": "x" * 65}, "display_name"),
        ("send_message", {"room": "dev", "body": "x", "after_seq": True}, "after_seq"),
        (
            "send_message",
            {"room": "dev", "body": "x", "idempotency_key": "k" * 129},
            "idempotency_key",
        ),
        ("read_messages", {"room": "dev", "limit": 501}, "limit"),
        ("read_messages", {"room": "dev", "kinds": ["chat"]}, "kinds"),
        ("read_messages", {"room": "dev", "kinds": []}, "kinds"),
        ("read_messages", {"room": "dev", "kinds": ["join", "join"]}, "kinds"),
        ("review_message", {"room": "dev", "message_id": "m", "verdict": "lgtm"}, "verdict"),
        ("mark_read", {"room": "dev", "seq": 1.5}, "seq"),
        ("list_rooms", {"everything": True}, "everything"),
    ],
)
def test_arguments_outside_the_published_schema_are_validation_errors(
    tool, arguments, field, headers, workspace
):
    error = tool_error(call(tool, arguments, headers))

    assert error["code"] == "validation_error"
    assert field in error["details"]


def test_a_whole_float_is_an_integer_as_in_json_schema(headers, workspace):
    result = call("list_conversations", {"limit": 5.0}, headers).json()["result"]

    assert result["isError"] is False


def test_body_size_is_checked_by_the_service_with_the_rest_code(headers, workspace):
    error = tool_error(call("leave_note", {"body": "é" * 9000}, headers))

    assert error["code"] == "body_too_large"


def test_a_tool_that_crashes_answers_an_internal_error_not_a_page(headers, workspace, monkeypatch):
    from plumb_site.mcp import tools

    def crash(session, args):
        raise RuntimeError("boom")

    monkeypatch.setitem(tools._HANDLERS, "list_rooms", crash)

    response = call("list_rooms", {}, headers)

    assert response.status_code == 500
    error = error_of(response)
    assert error["code"] == -32603
    assert "boom" not in error["message"]


def test_the_stateless_era_ignores_a_session_id(headers, workspace, project_key):
    del headers["Plumb-Name"]
    headers["Mcp-Session-Id"] = mcp_session_open(project_key, workspace_slug="main").mcp_session_id

    response = modern("tools/call", {"name": "list_rooms", "arguments": {}}, headers)

    assert tool_error(response)["details"] == {"Plumb-Name": ["Required with a project key."]}


def test_list_rooms_pages_like_rest(headers, workspace):
    owner = SessionFactory(workspace=workspace, name="owner")
    for slug in ("a-1", "b-2", "c-3"):
        assert client_for(owner).post("/api/v1/rooms/", {"slug": slug}).status_code == 201

    def page(arguments: dict) -> dict:
        response = modern("tools/call", {"name": "list_rooms", "arguments": arguments}, headers)
        return response.json()["result"]["structuredContent"]

    first = page({"limit": 2})
    second = page({"limit": 2, "after_slug": "b-2"})

    assert [r["slug"] for r in first["rooms"]] == ["a-1", "b-2"]
    assert first["has_more"] is True
    assert [r["slug"] for r in second["rooms"]] == ["c-3"]
    assert second["has_more"] is False


def test_create_and_join_room_scrub_titles_topics_and_display_names(headers, workspace):
    token = "ghp" + "_kfhfgtKAQWYm85EZgslmBp65HpUbz04IfkvX"
    arguments = {"slug": "ops", "title": f"ops {token}", "topic": "t", "display_name": token}

    created = modern("tools/call", {"name": "create_room", "arguments": arguments}, headers)
    join = {"name": "join_room", "arguments": {"room": "ops", "display_name": token}}
    joined = modern("tools/call", join, {**headers, "Plumb-Name": "bob"})

    for response in (created, joined):
        assert token not in response.content.decode()
    assert created.json()["result"]["structuredContent"]["scrubbed"] == [
        {"kind": "github_token", "count": 2}
    ]
    assert joined.json()["result"]["structuredContent"]["scrubbed"] == [
        {"kind": "github_token", "count": 1}
    ]
    room = Room.objects.get(slug="ops")
    assert room.title == "ops [REDACTED:github_token]"
    assert set(Member.objects.values_list("display_name", flat=True)) == {"[REDACTED:github_token]"}
