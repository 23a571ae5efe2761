"""The MCP phases: the same operations through ``POST /mcp``, as the README configures it.

Each client is one MCP client with the configuration the README recommends:
the project key as bearer, ``Plumb-Workspace`` and ``Plumb-Name`` headers
(the session acted as is the connected session of that name), in the
handshake era: ``initialize`` and ``notifications/initialized`` once per
connection, before the phase's clock starts, then ``tools/call`` with
``MCP-Protocol-Version``. Every answer is checked: no JSON-RPC error, no
``isError`` result, and the result the REST phase it is compared with checks.
"""

from __future__ import annotations

import json
from typing import Any

from load import Client, Op, Operation
from ops import MESSAGE_BODY, NOTE_BODY, NotePool

PROTOCOL_VERSION = "2025-06-18"
MCP_PATH = "/mcp"


class McpDoor:
    """The headers of one named MCP client, and its calls."""

    def __init__(self, key: str, workspace: str) -> None:
        self.key = key
        self.workspace = workspace

    def headers(self, name: str, *, initialized: bool = True) -> dict[str, str]:
        headers = {
            "Plumb-Workspace": self.workspace,
            "Plumb-Name": name,
            "Accept": "application/json, text/event-stream",
        }
        if initialized:
            headers["MCP-Protocol-Version"] = PROTOCOL_VERSION
        return headers

    def initialize(self, c: Client, name: str) -> str:
        hello = {
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {
                "protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                "clientInfo": {"name": "plumb-bench", "version": "1"},
            },
        }  # fmt: skip
        status, data = c.request(
            "POST", MCP_PATH, self.key, json.dumps(hello).encode(),
            self.headers(name, initialized=False),
        )  # fmt: skip
        if status != 200 or "result" not in json.loads(data):
            return f"initialize: HTTP {status} {data[:200]!r}"
        done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        status, data = c.request(
            "POST", MCP_PATH, self.key, json.dumps(done).encode(), self.headers(name)
        )
        if status != 202:
            return f"notifications/initialized: HTTP {status} {data[:200]!r}"
        return ""

    def call(
        self, c: Client, name: str, tool: str, arguments: dict[str, Any], request_id: int
    ) -> tuple[dict[str, Any] | None, str]:
        """The tool's structured result, or None and what went wrong."""
        message = {
            "jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments},
        }  # fmt: skip
        status, data = c.request(
            "POST", MCP_PATH, self.key, json.dumps(message).encode(), self.headers(name)
        )
        if status != 200:
            return None, f"{tool}: HTTP {status} {data[:200]!r}"
        reply = json.loads(data)
        if "error" in reply:
            return None, f"{tool}: JSON-RPC error {reply['error']}"
        result = reply["result"]
        if result.get("isError"):
            return None, f"{tool}: tool error {result.get('structuredContent')}"
        return result["structuredContent"], ""


def mcp_operations(state: dict[str, Any], pool: NotePool) -> dict[str, Operation]:
    """``mcp_check_idle``, ``mcp_leave_note`` and ``mcp_send``, as their REST twins."""
    door = McpDoor(state["key"], state["workspace"])
    clients = [c["name"] for c in state["clients"]]
    senders = [p["sender"]["name"] for p in state["pairs"]]
    spread = state["rooms"]["spread"]

    def check_idle(c: Client, k: int, i: int) -> str:
        result, problem = door.call(c, clients[k], "check_messages", {}, i + 1)
        if result is not None and result["notes"] != []:
            return f"an idle check received notes: {result['notes']!r:.200}"
        return problem

    def leave_note(c: Client, k: int, i: int) -> str:
        to, tag = pool.recipient(i)
        arguments = {"to": to, "body": f"{NOTE_BODY} {tag}"}
        result, problem = door.call(c, senders[k], "leave_note", arguments, i + 1)
        if result is not None:
            if not result["note"]["body"].endswith(tag):
                return f"leave_note answered another note: {result['note']!r:.200}"
            pool.left[i] = tag
        return problem

    def send(c: Client, k: int, i: int) -> str:
        arguments = {"room": spread[i % len(spread)], "body": MESSAGE_BODY}
        result, problem = door.call(c, clients[k], "send_message", arguments, i + 1)
        if result is not None and result["message"]["body"] != MESSAGE_BODY:
            return f"send_message answered another message: {result['message']!r:.200}"
        return problem

    def as_client(c: Client, k: int) -> str:
        return door.initialize(c, clients[k])

    def as_sender(c: Client, k: int) -> str:
        return door.initialize(c, senders[k])

    return {
        "mcp_check_idle": Op(check_idle, prepare=as_client),
        # The notes it left are collected after it (checked, untimed), like REST's.
        "mcp_leave_note": Op(
            leave_note, prepare=as_sender, limit=pool.room_for_leaves, after=pool.collect
        ),
        "mcp_send": Op(send, prepare=as_client),
    }


MCP_LABELS = {
    "mcp_check_idle": "MCP check_messages, nothing pending",
    "mcp_leave_note": "MCP leave_note to a connected name",
    "mcp_send": "MCP send_message, spread over 50 rooms",
}
# Each MCP phase and the REST phase of the same run it is compared with.
MCP_TWINS = {
    "mcp_check_idle": ("check_idle", "check_messages"),
    "mcp_leave_note": ("leave_note", "leave_note"),
    "mcp_send": ("send_spread", "send_message"),
}
