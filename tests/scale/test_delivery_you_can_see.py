"""Delivery you can see (SPEC §3.6), black-box against plumb under gunicorn as
``make serve`` runs it, through REST and MCP:

* a note's state moves from waiting to delivered, with ``delivered_to``, as
  its sender sees it in its sent notes and in the thread;
* a waiting ``notes/sent`` call answers within a second of the pickup, served
  by another process than the pickup's, parked on its event loop;
* with ``note_ttl`` 2 s and nobody attached, the note bounces within a minute
  with no traffic at all (the server's own sweep, ``plumb_site/jobs.py``),
  its sender's next call carries plumb's notice, and a session started
  afterwards never receives it.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from mailbox.models import Note
from tests.factories import AgentNameFactory, ProjectFactory, ProjectKeyFactory, WorkspaceFactory
from tests.scale.harness import _opener, call

pytestmark = pytest.mark.django_db(transaction=True)

BOUNCE_WITHIN = 60.0  # seconds after note_ttl (SPEC §3.6: within a minute)
ANSWER_WITHIN = 1.0  # seconds from the pickup to the waiting call's answer
MCP_VERSION = "2026-07-28"


def mcp(server, key: str, name: str, tool: str, arguments: dict) -> dict:
    """One stateless-era tools/call as ``name`` of workspace ``main``; its structured result."""
    import urllib.request

    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": tool,
            "arguments": arguments,
            "_meta": {"io.modelcontextprotocol/protocolVersion": MCP_VERSION},
        },
    }
    request = urllib.request.Request(
        f"{server.url}/mcp", data=json.dumps(body).encode(), method="POST"
    )
    for header, value in {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "Authorization": f"Bearer {key}",
        "MCP-Protocol-Version": MCP_VERSION,
        "Mcp-Method": "tools/call",
        "Mcp-Name": tool,
        "Plumb-Workspace": "main",
        "Plumb-Name": name,
    }.items():
        request.add_header(header, value)
    with _opener.open(request, timeout=60) as response:
        result = json.loads(response.read())["result"]
    assert result["isError"] is False, result["structuredContent"]
    return result["structuredContent"]


@pytest.fixture
def world(server):
    workspace = WorkspaceFactory(project=ProjectFactory(slug="seen", note_ttl=2), slug="main")
    key = ProjectKeyFactory(project=workspace.project)
    return server, workspace, key.raw_key


def start(server, key: str, name: str) -> str:
    status, body = call(
        "POST",
        f"{server.url}/api/v1/sessions/",
        token=key,
        body={"workspace": "main", "name": name},
    )
    assert status == 201, body
    return body["token"]


def test_a_notes_state_moves_from_waiting_to_delivered_as_its_sender_sees_it(world):
    server, _, key = world
    bob = start(server, key, "bob")

    left = mcp(server, key, "alice", "leave_note", {"to": "bob", "body": "ready for review?"})
    before = mcp(server, key, "alice", "list_sent_notes", {})
    status, inbox = call("GET", f"{server.url}/api/v1/notes/", token=bob)
    after = mcp(server, key, "alice", "list_sent_notes", {})
    thread = mcp(
        server, key, "alice", "read_conversation", {"conversation_id": left["conversation_id"]}
    )

    assert left["note"]["state"] == "waiting"
    assert [n["state"] for n in before["sent"]] == ["waiting"]
    assert status == 200
    assert [n["id"] for n in inbox["notes"]] == [left["note"]["id"]]
    [delivered] = after["sent"]
    assert delivered["state"] == "delivered"
    assert delivered["delivered_to"] == {"name": "bob", "kind": "agent"}
    assert delivered["delivered_at"] == inbox["notes"][0]["delivered_at"]
    assert thread["conversation"]["notes"][0]["delivered_to"] == delivered["delivered_to"]


def test_a_waiting_sent_notes_call_answers_within_a_second_of_the_pickup(world):
    server, _, key = world
    alice, bob = start(server, key, "alice"), start(server, key, "bob")
    status, left = call(
        "POST", f"{server.url}/api/v1/notes/", token=alice, body={"to": "bob", "body": "?"}
    )
    assert status == 201, left
    answer: dict = {}

    def wait() -> None:
        answer["status"], answer["body"] = call(
            "GET", f"{server.url}/api/v1/notes/sent/?state=waiting&wait=20", token=alice
        )
        answer["at"] = time.monotonic()

    waiting = threading.Thread(target=wait, daemon=True)
    waiting.start()
    time.sleep(1.0)  # the call is parked by now
    picked_up = time.monotonic()
    status, inbox = call("GET", f"{server.url}/api/v1/notes/", token=bob)
    waiting.join(25)

    took = answer["at"] - picked_up
    print(f"\nsent-notes wait under gunicorn: answered {took:.3f} s after the pickup")
    assert status == 200
    assert [n["id"] for n in inbox["notes"]] == [left["note"]["id"]]
    assert answer["status"] == 200
    assert answer["body"]["sent"] == []
    assert took < ANSWER_WITHIN


def test_a_note_nobody_picks_up_bounces_within_a_minute_with_no_traffic(world):
    server, workspace, key = world
    AgentNameFactory(handle="dave", workspace=workspace)
    alice = start(server, key, "alice")
    status, left = call(
        "POST", f"{server.url}/api/v1/notes/", token=alice, body={"to": "dave", "body": "hello?"}
    )
    assert status == 201, left
    note = Note.objects.get(public_id=left["note"]["id"])
    due = time.monotonic() + 2  # note_ttl

    # No request reaches the server while the test waits: it reads the database.
    deadline = due + BOUNCE_WITHIN
    while time.monotonic() < deadline:
        note.refresh_from_db()
        if note.bounced_at is not None:
            break
        time.sleep(0.25)
    bounced_after = time.monotonic() - due
    print(f"\nbounce with no traffic: {bounced_after:.1f} s after its note_ttl")
    assert note.state == "bounced", f"not bounced {BOUNCE_WITHIN:g} s after its note_ttl"

    status, current = call("GET", f"{server.url}/api/v1/sessions/current/", token=alice)
    status_sent, sent = call("GET", f"{server.url}/api/v1/notes/sent/?state=bounced", token=alice)
    dave = start(server, key, "dave")
    status_dave, dave_inbox = call("GET", f"{server.url}/api/v1/notes/", token=dave)

    assert status == 200
    [notice] = current["notes"]
    assert notice["from"]["kind"] == "system"
    assert notice["bounce_of"] == left["note"]["id"]
    assert status_sent == 200
    assert [n["id"] for n in sent["sent"]] == [left["note"]["id"]]
    assert sent["sent"][0]["delivered_at"] is None
    assert status_dave == 200
    assert dave_inbox["notes"] == []
    assert note.delivered_to_id is None
