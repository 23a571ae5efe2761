"""Every tool through the official SDK client, in both protocol eras (SPEC §6)."""

from __future__ import annotations

import pytest
from mcp.shared.exceptions import MCPError

from mailbox.models import McpSession, Note, Session
from rooms.models import Event, Message
from tests.factories import SessionFactory
from tests.mcp.conftest import (
    BINDING_TOOL_NAMES,
    MODES,
    Rest,
    agent_headers,
    error_payload,
    payload,
    run_client,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("mode", MODES)
def test_every_tool_answers_its_rest_json(mode, world, mcp_url, live_server):
    bob = Rest(live_server.url, SessionFactory(workspace=world.workspace, name="bob").raw_token)

    async def body(client):
        listed = await client.list_tools()
        assert {tool.name for tool in listed.tools} == set(BINDING_TOOL_NAMES)
        out = {"version": client.protocol_version}
        out["start"] = payload(await client.call_tool("session_start", {}))
        out["again"] = payload(await client.call_tool("session_start", {"name": "alice"}))
        out["create"] = payload(
            await client.call_tool("create_room", {"slug": "dev", "title": "Dev"})
        )
        assert bob("POST", "/api/v1/rooms/dev/join", {})[0] == 201
        status, sent = bob("POST", "/api/v1/rooms/dev/messages/", {"body": "ready @alice"})
        assert status == 201
        out["rest_message_id"] = sent["message"]["id"]
        out["rooms"] = payload(await client.call_tool("list_rooms", {}))
        out["read"] = payload(
            await client.call_tool(
                "read_messages", {"room": "dev", "after_seq": 0, "kinds": ["message"]}
            )
        )
        out["send"] = payload(
            await client.call_tool(
                "send_message",
                {
                    "room": "dev",
                    "body": "thanks @bob",
                    "require_read": True,
                    "idempotency_key": "k",
                },
            )
        )
        out["review"] = payload(
            await client.call_tool(
                "review_message",
                {"room": "dev", "message_id": out["rest_message_id"], "verdict": "approve"},
            )
        )
        out["mark"] = payload(await client.call_tool("mark_read", {"room": "dev", "seq": 2}))
        out["join_again"] = payload(await client.call_tool("join_room", {"room": "dev"}))
        out["note"] = payload(await client.call_tool("leave_note", {"to": "bob", "body": "hi"}))
        reply = {"body": "hello back", "conversation_id": out["note"]["conversation_id"]}
        assert bob("POST", "/api/v1/notes/", reply)[0] == 201
        out["check"] = payload(await client.call_tool("check_messages", {"wait": 5}))
        out["threads"] = payload(await client.call_tool("list_conversations", {"limit": 10}))
        out["thread"] = payload(
            await client.call_tool(
                "read_conversation", {"conversation_id": out["note"]["conversation_id"]}
            )
        )
        out["leave"] = payload(await client.call_tool("leave_room", {"room": "dev"}))
        return out

    out = run_client(mcp_url, agent_headers(world.key.raw_key), mode, body)

    assert out["version"] == ("2025-11-25" if mode == "legacy" else "2026-07-28")
    assert out["start"]["session"]["name"] == "alice"
    assert out["start"]["session"]["workspace"] == "main"
    assert out["start"]["token"].startswith("plumb_tok_")
    assert out["start"]["notes"] == []
    assert out["again"]["session"]["id"] == out["start"]["session"]["id"]
    assert out["again"]["token"] is None
    assert out["create"]["room"]["slug"] == "dev"
    assert out["create"]["event"]["kind"] == "join"
    assert out["create"]["latest_seq"] == 1
    assert [room["slug"] for room in out["rooms"]["rooms"]] == ["dev"]
    assert out["rooms"]["rooms"][0]["unseen"] == 1
    assert [e["message"]["body"] for e in out["read"]["events"]] == ["ready @alice"]
    assert out["read"]["read_seq"] == 3
    assert out["send"]["message"]["seq"] == 4
    assert [m["handle"] for m in out["send"]["mentions"]] == ["bob"]
    assert out["send"]["unseen_before_send"] == 0
    assert out["send"]["replayed"] is False
    assert out["review"]["event"]["kind"] == "review"
    assert out["review"]["event"]["review"]["verdict"] == "approve"
    assert out["review"]["latest_seq"] == 5
    assert out["mark"] == {"read_seq": 4, "latest_seq": 5, "notes": []}
    assert out["join_again"]["event"] is None
    assert out["note"]["delivery"] == "session"
    assert out["note"]["note"]["to"] == "bob"
    assert [n["body"] for n in out["check"]["notes"]] == ["hello back"]
    assert out["threads"]["conversations"][0]["id"] == out["note"]["conversation_id"]
    assert out["threads"]["conversations"][0]["notes_count"] == 2
    assert [n["body"] for n in out["thread"]["conversation"]["notes"]] == ["hi", "hello back"]
    assert out["leave"]["event"]["kind"] == "leave"
    assert Event.objects.filter(room__slug="dev").count() == 6
    assert Message.objects.filter(room__slug="dev").count() == 2
    assert Session.objects.filter(name__handle="alice").count() == 1


@pytest.mark.parametrize("mode", MODES)
def test_a_domain_error_is_an_error_result_with_the_rest_code(mode, world, mcp_url):
    async def body(client):
        missing = await client.call_tool("send_message", {"room": "nowhere", "body": "hi"})
        invalid = await client.call_tool("mark_read", {"room": "dev", "seq": -1, "sq": 1})
        return error_payload(missing), error_payload(invalid)

    missing, invalid = run_client(mcp_url, agent_headers(world.key.raw_key), mode, body)

    assert missing["error"]["code"] == "room_not_found"
    assert set(missing) == {"error"}  # no notes on an error, as on REST
    assert invalid["error"]["code"] == "validation_error"
    assert set(invalid["error"]["details"]) == {"seq", "sq"}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("authorization", "code"),
    [
        ("Bearer plumb_key_aaaaaaaa_" + "x" * 43, "invalid_token"),
        ("Basic dXNlcjpwYXNz", "invalid_token"),
        (None, "not_authenticated"),
    ],
)
def test_a_bad_credential_is_refused_with_its_rest_code(mode, authorization, code, world, mcp_url):
    headers = agent_headers(world.key.raw_key)
    if authorization is None:
        del headers["Authorization"]
    else:
        headers["Authorization"] = authorization

    async def body(client):
        await client.call_tool("list_rooms", {})

    with pytest.raises(MCPError) as refused:
        run_client(mcp_url, headers, mode, body)

    assert refused.value.error.data["error"]["code"] == code
    assert not Session.objects.exists()


@pytest.mark.parametrize("mode", MODES)
def test_pending_notes_ride_on_tool_results_exactly_once(mode, world, mcp_url, live_server):
    bob = Rest(live_server.url, SessionFactory(workspace=world.workspace, name="bob").raw_token)
    # Before alice exists: a note for whoever attaches to the workspace next.
    status, left = bob("POST", "/api/v1/notes/", {"body": "handing over"})
    assert status == 201

    async def body(client):
        # The first call starts alice implicitly, and delivers what waited for her.
        first = payload(await client.call_tool("list_rooms", {}))
        more = {"body": "one more", "conversation_id": left["conversation_id"]}
        assert bob("POST", "/api/v1/notes/", more)[0] == 201
        second = payload(await client.call_tool("list_conversations", {}))
        third = payload(await client.call_tool("check_messages", {}))
        return first, second, third

    first, second, third = run_client(mcp_url, agent_headers(world.key.raw_key), mode, body)

    assert [n["body"] for n in first["notes"]] == ["handing over"]
    assert first["notes"][0]["from"]["name"] == "bob"
    assert [n["body"] for n in second["notes"]] == ["one more"]
    assert third["notes"] == []
    alice = Session.objects.get(name__handle="alice")
    assert set(Note.objects.values_list("delivered_to", flat=True)) == {alice.pk}


@pytest.mark.parametrize("mode", MODES)
def test_a_session_token_acts_as_its_session(mode, world, mcp_url):
    carol = SessionFactory(workspace=world.workspace, name="carol")
    headers = {"Authorization": f"Bearer {carol.raw_token}"}

    async def body(client):
        return payload(await client.call_tool("session_start", {"name": "carol"}))

    started = run_client(mcp_url, headers, mode, body)

    assert started["session"]["id"] == carol.public_id
    assert started["token"] is None
    assert Session.objects.count() == 1


def test_a_handshake_client_without_a_name_acts_as_a_generated_session(world, mcp_url):
    headers = agent_headers(world.key.raw_key, name=None)

    async def body(client):
        first = payload(await client.call_tool("session_start", {}))
        rooms = payload(await client.call_tool("create_room", {"slug": "scratch"}))
        again = payload(await client.call_tool("session_start", {}))
        return first, rooms, again

    first, rooms, again = run_client(mcp_url, headers, "legacy", body)

    session = Session.objects.get()
    assert McpSession.objects.get().session == session  # the id the client carried back
    assert first["session"]["name"] == session.name.handle
    assert first["token"] is None  # initialize started it; its token goes to no one
    assert again["session"]["id"] == first["session"]["id"]
    assert rooms["event"]["actor"]["handle"] == session.name.handle


def test_a_stateless_client_without_a_name_is_told_to_send_one(world, mcp_url):
    headers = agent_headers(world.key.raw_key, name=None)

    async def body(client):
        return error_payload(await client.call_tool("list_rooms", {}))

    refused = run_client(mcp_url, headers, "2026-07-28", body)

    assert refused["error"]["code"] == "validation_error"
    assert "Plumb-Name" in refused["error"]["details"]
    assert not Session.objects.exists()
