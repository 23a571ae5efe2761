"""An MCP agent and a REST agent work together: notes both ways, and one room."""

from __future__ import annotations

import pytest

from tests.factories import SessionFactory
from tests.mcp.conftest import MODES, Rest, agent_headers, payload, run_client

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("mode", MODES)
def test_an_mcp_session_and_a_rest_session_talk_through_notes_and_a_room(
    mode, world, mcp_url, live_server
):
    bob = Rest(live_server.url, SessionFactory(workspace=world.workspace, name="bob").raw_token)
    status, _ = bob("POST", "/api/v1/rooms/", {"slug": "release", "title": "Release"})
    assert status == 201
    seen = {}

    async def body(client):
        start = payload(await client.call_tool("session_start", {}))
        alice = Rest(live_server.url, start["token"])
        payload(await client.call_tool("join_room", {"room": "release", "display_name": "Alice"}))
        sent = payload(
            await client.call_tool("send_message", {"room": "release", "body": "ping @bob"})
        )

        # bob reads the room over REST, answers, and asserts the state first.
        status, read = bob("GET", "/api/v1/rooms/release/messages/?kinds=message")
        seen["bob_read"] = read
        status, pong = bob(
            "POST",
            "/api/v1/rooms/release/messages/",
            {"body": "pong @alice", "require_read": True},
        )
        assert status == 201, pong
        got = payload(await client.call_tool("read_messages", {"room": "release"}))

        note = payload(await client.call_tool("leave_note", {"to": "bob", "body": "private"}))
        status, inbox = bob("GET", "/api/v1/notes/")
        seen["bob_inbox"] = inbox
        reply = {"body": "got it", "conversation_id": note["conversation_id"]}
        assert bob("POST", "/api/v1/notes/", reply)[0] == 201
        answer = payload(await client.call_tool("check_messages", {"wait": 5}))

        # The same reads over both front doors give the same JSON.
        parity = {}
        for tool, arguments, path in [
            ("list_rooms", {}, "/api/v1/rooms/"),
            ("list_conversations", {}, "/api/v1/conversations/"),
            (
                "read_conversation",
                {"conversation_id": note["conversation_id"]},
                f"/api/v1/conversations/{note['conversation_id']}/",
            ),
            (
                "read_messages",
                {"room": "release", "after_seq": 0, "mark_read": False},
                "/api/v1/rooms/release/messages/?after_seq=0&mark_read=false",
            ),
        ]:
            parity[tool] = (
                payload(await client.call_tool(tool, arguments)),
                alice("GET", path)[1],
            )
        return sent, got, answer, parity

    sent, got, answer, parity = run_client(mcp_url, agent_headers(world.key.raw_key), mode, body)

    bob_messages = [e["message"] for e in seen["bob_read"]["events"]]
    assert [m["body"] for m in bob_messages] == ["ping @bob"]
    assert bob_messages[0]["author"]["display_name"] == "Alice"
    assert [m["handle"] for m in bob_messages[0]["mentions"]] == ["bob"]
    assert sent["message"]["id"] == bob_messages[0]["id"]
    assert [e["message"]["body"] for e in got["events"]] == ["pong @alice"]
    assert [m["handle"] for m in got["events"][0]["message"]["mentions"]] == ["alice"]

    assert [n["body"] for n in seen["bob_inbox"]["notes"]] == ["private"]
    assert seen["bob_inbox"]["notes"][0]["from"]["name"] == "alice"
    assert [n["body"] for n in answer["notes"]] == ["got it"]

    for tool, (over_mcp, over_rest) in parity.items():
        assert over_mcp == over_rest, tool
