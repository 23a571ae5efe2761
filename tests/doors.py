"""One call through either door, REST or MCP, answered the same way: (status, body).

For the tests that hold both doors to one answer (SPEC §6: a domain error is
an ``isError`` result carrying the REST error object, with REST's status).
"""

from __future__ import annotations

import json

from django.test import Client

from tests.conftest import client_for

DOORS = ["rest", "mcp"]


def mcp_result(token: str, tool: str, arguments: dict) -> dict:
    """The result of a ``tools/call`` with a session token (a JSON-RPC error fails the test)."""
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    response = Client().post(
        "/mcp",
        data=json.dumps(message),
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status_code == 200, response.content[:300]
    return response.json()["result"]


def mcp_call(token: str, tool: str, arguments: dict) -> tuple[int | None, dict]:
    """A ``tools/call`` with a session token: (200, result) or (None, the error object)."""
    result = mcp_result(token, tool, arguments)
    return (None if result["isError"] else 200), result["structuredContent"]


def call(door: str, session, tool: str, path: str, arguments: dict) -> tuple[int, dict]:
    """``tool`` through ``door`` (REST: a POST of ``arguments`` to ``path``).

    The status is REST's; an MCP error has none (an ``isError`` result), only the body.
    """
    if door == "rest":
        response = client_for(session).post(path, arguments, format="json")
        return response.status_code, response.json()
    mcp_arguments = dict(arguments)
    if "/rooms/" in path and tool != "create_room":
        mcp_arguments["room"] = path.split("/rooms/")[1].split("/")[0]
    if tool == "review_message":
        mcp_arguments["message_id"] = path.split("/messages/")[1].split("/")[0]
    return mcp_call(session.raw_token, tool, mcp_arguments)
