"""Driving plumb's MCP endpoint: a live server and the official SDK client.

The SDK client runs in its own event loop (``anyio.run``) inside an ordinary
test, while pytest-django's live server answers from its own threads against
the same test database (hence ``transaction=True`` wherever it is used).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

from tests.factories import ProjectKeyFactory, WorkspaceFactory
from tests.framing import says_the_same

T = TypeVar("T")

# legacy: the initialize handshake (2025-11-25); auto: server/discover, then the
# era the server names; 2026-07-28: the stateless era with no probe at all.
BINDING_TOOL_NAMES = [
    "session_start",
    "leave_note",
    "check_messages",
    "list_conversations",
    "read_conversation",
    "list_rooms",
    "create_room",
    "join_room",
    "leave_room",
    "send_message",
    "read_messages",
    "review_message",
    "mark_read",
    "wait_for_activity",
    "list_sent_notes",
    "search",
]
"""The tool names of SPEC §6, in the order tools/list publishes them."""

MODES = ["legacy", "auto", "2026-07-28"]


@pytest.fixture
def world(transactional_db):
    """A project with workspace ``main`` and a key; ``world.key.raw_key`` is the secret."""
    workspace = WorkspaceFactory(slug="main")
    key = ProjectKeyFactory(project=workspace.project)
    return type("World", (), {"workspace": workspace, "project": workspace.project, "key": key})


@pytest.fixture
def mcp_url(live_server) -> str:
    return f"{live_server.url}/mcp"


class Rest:
    """A REST client of the live server for one session token, with the stdlib.

    Usable inside the SDK's event loop, where Django's own test client (which
    touches the database in-process) is not allowed.
    """

    def __init__(self, base_url: str, token: str):
        self.base_url, self.token = base_url, token

    def __call__(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base_url + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")


def agent_headers(key: str, name: str | None = "alice", workspace: str | None = "main") -> dict:
    """The three headers of SPEC §6 (a header left out when its value is None)."""
    headers = {"Authorization": f"Bearer {key}"}
    if workspace is not None:
        headers["Plumb-Workspace"] = workspace
    if name is not None:
        headers["Plumb-Name"] = name
    return headers


def run_client(
    url: str, headers: dict[str, str], mode: str, body: Callable[[Client], Awaitable[T]]
) -> T:
    """Connect the SDK client in ``mode`` with ``headers``, run ``body``, disconnect."""

    async def main() -> T:
        timeout = httpx2.Timeout(30, read=60)
        async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
            transport = streamable_http_client(url, http_client=http)
            async with Client(transport, mode=mode) as client:
                return await body(client)

    try:
        return anyio.run(main)
    except BaseExceptionGroup as group:
        # anyio's task groups wrap what the body raised; the test wants the error itself.
        raise _innermost(group) from group


def _innermost(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def payload(result: CallToolResult) -> dict[str, Any]:
    """A successful tool result's JSON; the text form must say the same as the structured one."""
    assert not result.is_error, result.structured_content
    return _both(result)


def error_payload(result: CallToolResult) -> dict[str, Any]:
    """An error result's JSON (the REST error object)."""
    assert result.is_error, result.structured_content
    return _both(result)


def _both(result: CallToolResult) -> dict[str, Any]:
    assert len(result.content) == 1
    assert says_the_same(result.content[0].text, result.structured_content)
    return result.structured_content


def published_tools(project_key) -> dict[str, dict]:
    """The live ``tools/list``, by tool name, as a client with ``project_key`` sees it."""
    from django.test import Client as DjangoClient

    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    response = DjangoClient().post(
        "/mcp",
        data=json.dumps(message),
        content_type="application/json",
        headers={"Authorization": f"Bearer {project_key.raw_key}"},
    )
    assert response.status_code == 200
    return {tool["name"]: tool for tool in response.json()["result"]["tools"]}
