"""Moderation services (SPEC §5): each action is a moderation event in the room
stream and an audit record, and agents feel its effect through the API."""

import pytest

from common.errors import ValidationFailed
from mailbox.models import AuditRecord, Conversation
from mailbox.services import conversation_lock, conversation_unlock
from rooms import services
from rooms.models import Event, Member, Message, Room
from tests.conftest import client_for
from tests.factories import SessionFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def room(agent_session, session_client, bob):
    session_client.post("/api/v1/rooms/", {"slug": "ops"}, format="json")
    client_for(bob).post("/api/v1/rooms/ops/join", {}, format="json")
    session_client.post("/api/v1/rooms/ops/messages/", {"body": "deploying now"}, format="json")
    return Room.objects.get(slug="ops")


def _moderation_actions() -> list[str]:
    return list(
        AuditRecord.objects.exclude(action__startswith="key.")
        .order_by("id")
        .values_list("action", flat=True)
    )


def _bob(room):
    return Member.objects.get(room=room, name__handle="bob")


def _events(client) -> list[dict]:
    return client.get("/api/v1/rooms/ops/messages/?after_seq=0&limit=500").json()["events"]


def test_hiding_a_message_adds_a_moderation_event_and_hides_the_body(room, session_client):
    message = Message.objects.get(room=room)
    head = room.head_seq

    event = services.message_hide(message, actor="admin:mod", reason="leaked a hostname")

    assert event.seq == head + 1
    assert event.kind == "moderation"
    events = _events(session_client)
    shown = next(e for e in events if e["kind"] == "message")
    assert shown["message"]["hidden"] is True
    assert shown["message"]["body"] is None
    moderation = events[-1]
    assert moderation["kind"] == "moderation"
    assert moderation["moderation"] == {
        "action": "hide",
        "reason": "leaked a hostname",
        "message_id": message.public_id,
        "member": None,
    }
    assert moderation["actor"] is None
    record = AuditRecord.objects.get(action="room.hide")
    assert record.actor == "admin:mod"
    assert record.room_slug == "ops"
    assert record.project == room.project
    assert message.public_id in record.target


def test_hiding_twice_changes_and_records_nothing(room):
    message = Message.objects.get(room=room)
    services.message_hide(message, actor="admin:mod", reason="once")
    head = Room.objects.get(pk=room.pk).head_seq

    assert services.message_hide(message, actor="admin:mod", reason="twice") is None

    assert Room.objects.get(pk=room.pk).head_seq == head
    assert AuditRecord.objects.filter(action="room.hide").count() == 1


def test_unhiding_serves_the_body_again(room, session_client):
    message = Message.objects.get(room=room)
    services.message_hide(message, actor="admin:mod", reason="check")

    services.message_unhide(message, actor="admin:mod")

    shown = next(e for e in _events(session_client) if e["kind"] == "message")
    assert shown["message"]["body"] == "deploying now"
    assert AuditRecord.objects.filter(action="room.unhide").count() == 1


@pytest.mark.parametrize("reason", ["", "   ", None])
def test_hiding_needs_a_reason(room, reason):
    message = Message.objects.get(room=room)

    with pytest.raises(ValidationFailed):
        services.message_hide(message, actor="admin:mod", reason=reason)

    assert not Message.objects.get(pk=message.pk).hidden
    assert _moderation_actions() == []


def test_a_muted_member_cannot_send_or_review_until_unmuted(room, bob):
    services.member_mute(_bob(room), actor="admin:mod", reason="spamming")
    message_id = Message.objects.get(room=room).public_id
    client = client_for(bob)

    sent = client.post("/api/v1/rooms/ops/messages/", {"body": "hi"}, format="json")
    reviewed = client.post(
        f"/api/v1/rooms/ops/messages/{message_id}/reviews/", {"verdict": "approve"}, format="json"
    )

    assert sent.status_code == 403
    assert sent.json()["error"]["code"] == "member_muted"
    assert reviewed.json()["error"]["code"] == "member_muted"
    services.member_unmute(_bob(room), actor="admin:mod")
    assert (
        client.post("/api/v1/rooms/ops/messages/", {"body": "hi"}, format="json").status_code == 201
    )
    assert _moderation_actions() == ["room.mute", "room.unmute"]


def test_removing_a_member_takes_it_out_of_the_room(room, session_client, bob):
    event = services.member_remove(_bob(room), actor="admin:mod", reason="left the team")

    assert event.data == {"action": "remove", "reason": "left the team", "member": "bob"}
    members = session_client.get("/api/v1/rooms/ops/members/").json()["members"]
    assert [m["handle"] for m in members] == ["alice"]
    refused = client_for(bob).post(
        "/api/v1/rooms/ops/messages/", {"body": "still here?"}, format="json"
    )
    assert refused.json()["error"]["code"] == "not_a_member"


def test_a_locked_room_refuses_sends_with_423_but_can_be_read(room, session_client):
    services.room_lock(room, actor="cli:root", reason="incident review")

    refused = session_client.post("/api/v1/rooms/ops/messages/", {"body": "x"}, format="json")
    read = session_client.get("/api/v1/rooms/ops/messages/?after_seq=0")

    assert refused.status_code == 423
    assert refused.json()["error"]["code"] == "room_locked"
    assert read.status_code == 200
    assert read.json()["events"][-1]["moderation"]["action"] == "lock"
    assert session_client.get("/api/v1/rooms/ops/").json()["room"]["locked"] is True
    services.room_unlock(room, actor="cli:root")
    ok = session_client.post("/api/v1/rooms/ops/messages/", {"body": "x"}, format="json")
    assert ok.status_code == 201


def test_moderation_events_keep_the_stream_gap_free(room, session_client):
    message = Message.objects.get(room=room)
    services.message_hide(message, actor="a", reason="r")
    services.member_mute(_bob(room), actor="a", reason="r")
    services.room_lock(room, actor="a", reason="r")
    services.room_unlock(room, actor="a")

    seqs = list(Event.objects.filter(room=room).order_by("seq").values_list("seq", flat=True))

    assert seqs == list(range(1, len(seqs) + 1))
    assert Room.objects.get(pk=room.pk).head_seq == len(seqs)


def test_moderation_events_count_as_unread_for_the_read_position_but_do_not_block(
    room, session_client
):
    session_client.get("/api/v1/rooms/ops/messages/")
    services.room_lock(room, actor="a", reason="r")
    services.room_unlock(room, actor="a")

    sent = session_client.post(
        "/api/v1/rooms/ops/messages/",
        {"body": "status: green", "require_read": True},
        format="json",
    )

    assert sent.status_code == 201


def test_a_locked_conversation_refuses_notes_and_is_audited(
    workspace, agent_session, session_client
):
    bob = SessionFactory(workspace=workspace, name="bob")
    started = session_client.post("/api/v1/notes/", {"body": "hi", "to": "bob"}, format="json")
    conversation = Conversation.objects.get(public_id=started.json()["conversation_id"])

    assert conversation_lock(conversation, actor="admin:mod", reason="off topic") is True
    refused = client_for(bob).post(
        "/api/v1/notes/",
        {"body": "reply", "conversation_id": conversation.public_id},
        format="json",
    )

    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "conversation_locked"
    history = session_client.get(f"/api/v1/conversations/{conversation.public_id}/").json()
    assert history["conversation"]["locked"] is True
    assert conversation_lock(conversation, actor="admin:mod", reason="again") is False
    assert conversation_unlock(conversation, actor="admin:mod") is True
    assert _moderation_actions() == ["conversation.lock", "conversation.unlock"]
