"""``plumb room|message|member|conversation``: the admin's moderation, from scripts.

Each test runs the command in-process and checks its output, the exit status
Django would give it (``CommandError.returncode``), the database, and what an
agent sees through the API afterwards: the command must call the very
services the admin calls, so the effects are the same.
"""

from __future__ import annotations

import pytest

from mailbox.models import AuditRecord, Conversation
from mailbox.services import note_leave
from rooms import services
from rooms.models import Event, Member, Message, Room
from tests.cli import plumb, plumb_fails
from tests.conftest import assert_error, client_for

pytestmark = pytest.mark.django_db

OPERATOR = "cli:ops-alice"


@pytest.fixture(autouse=True)
def operator(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr("getpass.getuser", lambda: "ops-alice")
    return OPERATOR


@pytest.fixture
def room(alice, bob) -> Room:
    """Room ``ops`` of alice's project: alice and bob are members, alice said one thing."""
    services.room_create(alice, slug="ops")
    services.room_join(bob, "ops")
    services.message_send(alice, "ops", body="deploying now")
    return Room.objects.get(slug="ops")


def records() -> list[tuple[str, str, str, str, str]]:
    return list(
        AuditRecord.objects.exclude(action__startswith="key.")
        .order_by("id")
        .values_list("actor", "action", "room_slug", "target", "reason")
    )


def last_moderation(room: Room) -> dict:
    event = Event.objects.filter(room=room, kind=Event.Kind.MODERATION).latest("seq")
    return {"seq": event.seq, **event.data}


def send(session, body: str = "hello"):
    return client_for(session).post("/api/v1/rooms/ops/messages/", {"body": body}, format="json")


# --- rooms ------------------------------------------------------------------------------


def test_room_lock_locks_the_room_with_a_moderation_event_and_an_audit_record(room, bob):
    out, err = plumb("room", "lock", "ops", "--reason", "release freeze")

    moderation = last_moderation(room)
    assert out == f"Locked room ops (moderation event seq {moderation['seq']}).\n"
    assert err == ""
    assert Room.objects.get(pk=room.pk).locked
    assert moderation == {"seq": moderation["seq"], "action": "lock", "reason": "release freeze"}
    assert records() == [(OPERATOR, "room.lock", "ops", "room", "release freeze")]
    assert_error(send(bob), 423, "room_locked")


@pytest.mark.parametrize("reason", [None, "", "   "])
def test_room_lock_needs_a_reason_like_the_admin(room, reason):
    given = () if reason is None else ("--reason", reason)
    args = ("room", "lock", "ops", *given)

    error = plumb_fails(*args)

    assert str(error) == "A reason is required for this moderation action. (validation_error)"
    assert error.returncode == 1
    assert not Room.objects.get(pk=room.pk).locked
    assert records() == []


def test_room_lock_twice_changes_and_records_nothing_the_second_time(room):
    plumb("room", "lock", "ops", "--reason", "freeze")
    head = Room.objects.get(pk=room.pk).head_seq

    out, _ = plumb("room", "lock", "ops", "--reason", "again")

    assert out == "Room ops is locked; nothing changed.\n"
    assert Room.objects.get(pk=room.pk).head_seq == head
    assert [r[1] for r in records()] == ["room.lock"]


def test_room_unlock_needs_no_reason_and_lets_members_send_again(room, bob):
    plumb("room", "lock", "ops", "--reason", "freeze")

    out, _ = plumb("room", "unlock", "ops")

    assert out.startswith("Unlocked room ops (moderation event seq ")
    assert not Room.objects.get(pk=room.pk).locked
    assert records()[-1] == (OPERATOR, "room.unlock", "ops", "room", "")
    assert send(bob).status_code == 201


def test_room_unlock_of_an_open_room_says_so(room):
    out, _ = plumb("room", "unlock", "ops")
    assert out == "Room ops is not locked; nothing changed.\n"
    assert records() == []


def test_an_unknown_room_is_refused_with_its_code_and_where_to_look_it_up(db):
    error = plumb_fails("room", "lock", "nowhere", "--reason", "x")
    assert str(error).splitlines() == [
        "No room is named 'nowhere'. (room_not_found)",
        "Look it up with `.venv/bin/plumb room list`.",
    ]
    assert error.returncode == 1


# --- messages ---------------------------------------------------------------------------


def test_message_hide_hides_the_body_from_agents(room, bob):
    message = Message.objects.get(room=room)

    out, _ = plumb("message", "hide", message.public_id, "--reason", "leaked a hostname")

    seq = last_moderation(room)["seq"]
    assert out == (
        f"Hid message {message.public_id} (seq {message.seq}) in room ops "
        f"(moderation event seq {seq}).\n"
    )
    message.refresh_from_db()
    assert message.hidden
    assert message.hidden_reason == "leaked a hostname"
    events = client_for(bob).get("/api/v1/rooms/ops/messages/?after_seq=0").json()["events"]
    shown = next(e for e in events if e["kind"] == "message")["message"]
    assert shown["hidden"] is True
    assert shown["body"] is None
    assert records() == [
        (
            OPERATOR,
            "room.hide",
            "ops",
            f"message {message.public_id} (seq {message.seq})",
            "leaked a hostname",
        )
    ]


def test_message_hide_needs_a_reason(room):
    message = Message.objects.get(room=room)

    error = plumb_fails("message", "hide", message.public_id)

    assert "(validation_error)" in str(error)
    assert error.returncode == 1
    assert not Message.objects.get(pk=message.pk).hidden
    assert records() == []


def test_message_unhide_serves_the_body_again(room, bob):
    message = Message.objects.get(room=room)
    plumb("message", "hide", message.public_id, "--reason", "checking")

    out, _ = plumb("message", "unhide", message.public_id, "--reason", "false alarm")

    assert out.startswith(f"Unhid message {message.public_id}")
    events = client_for(bob).get("/api/v1/rooms/ops/messages/?after_seq=0").json()["events"]
    assert next(e for e in events if e["kind"] == "message")["message"]["body"] == "deploying now"
    assert [r[1] for r in records()] == ["room.hide", "room.unhide"]
    assert plumb("message", "unhide", message.public_id)[0].endswith(
        "is not hidden; nothing changed.\n"
    )


def test_an_unknown_message_id_is_refused_and_where_to_look_it_up(room):
    error = plumb_fails("message", "hide", "msg_nothing", "--reason", "x")
    assert str(error).splitlines() == [
        "No message has the id 'msg_nothing'. (message_not_found)",
        "Look it up with `.venv/bin/plumb message list <room>`.",
    ]
    assert error.returncode == 1


# --- members ----------------------------------------------------------------------------


def test_member_mute_refuses_the_members_sends_until_unmuted(room, bob):
    out, _ = plumb("member", "mute", "ops", "bob", "--reason", "flooding")

    assert out.startswith("Muted bob in room ops (moderation event seq ")
    assert last_moderation(room)["member"] == "bob"
    assert_error(send(bob), 403, "member_muted")

    out, _ = plumb("member", "unmute", "ops", "bob")

    assert out.startswith("Unmuted bob in room ops")
    assert send(bob).status_code == 201
    assert records() == [
        (OPERATOR, "room.mute", "ops", "member bob", "flooding"),
        (OPERATOR, "room.unmute", "ops", "member bob", ""),
    ]


def test_member_remove_takes_the_member_out(room, bob):
    out, _ = plumb("member", "remove", "ops", "bob", "--reason", "wrong room")

    assert out.startswith("Removed bob from room ops (moderation event seq ")
    assert not Member.objects.filter(room=room, name__handle="bob", left_at__isnull=True).exists()
    assert_error(client_for(bob).get("/api/v1/rooms/ops/messages/"), 403, "not_a_member")
    assert records() == [(OPERATOR, "room.remove", "ops", "member bob", "wrong room")]


@pytest.mark.parametrize("action", ["mute", "remove"])
def test_member_mute_and_remove_need_a_reason(room, action):
    error = plumb_fails("member", action, "ops", "bob")

    assert "(validation_error)" in str(error)
    assert error.returncode == 1
    member = Member.objects.get(room=room, name__handle="bob")
    assert member.is_current
    assert not member.muted
    assert records() == []


def test_a_name_that_is_not_a_member_is_refused(room, carol):
    error = plumb_fails("member", "mute", "ops", "carol", "--reason", "x")
    assert str(error) == "'carol' is not a member of room 'ops'. (not_a_member)"
    assert error.returncode == 1
    assert records() == []


# --- conversations ----------------------------------------------------------------------


@pytest.fixture
def thread(alice, bob) -> Conversation:
    left = note_leave(alice, body="Can you take the release notes?", to="bob")
    return Conversation.objects.get(pk=left.note.conversation_id)


def reply(session, thread: Conversation):
    return client_for(session).post(
        "/api/v1/notes/", {"body": "On it.", "conversation_id": thread.public_id}, format="json"
    )


def test_conversation_lock_refuses_further_notes_until_unlocked(thread, alice, bob):
    out, _ = plumb("conversation", "lock", thread.public_id, "--reason", "off-topic")

    assert out == f"Locked conversation {thread.public_id}.\n"
    assert_error(reply(bob, thread), 409, "conversation_locked")

    out, _ = plumb("conversation", "unlock", thread.public_id)

    assert out == f"Unlocked conversation {thread.public_id}.\n"
    assert reply(bob, thread).status_code == 201
    project = alice.workspace.project.slug
    assert list(
        AuditRecord.objects.exclude(action__startswith="key.")
        .order_by("id")
        .values_list("actor", "action", "project_slug", "target", "reason")
    ) == [
        (OPERATOR, "conversation.lock", project, f"conversation {thread.public_id}", "off-topic"),
        (OPERATOR, "conversation.unlock", project, f"conversation {thread.public_id}", ""),
    ]


def test_conversation_lock_needs_a_reason_and_says_when_nothing_changed(thread, bob):
    error = plumb_fails("conversation", "lock", thread.public_id, "--reason", " ")
    assert "(validation_error)" in str(error)
    assert error.returncode == 1
    assert reply(bob, thread).status_code == 201

    out, _ = plumb("conversation", "unlock", thread.public_id)
    assert out == f"The conversation {thread.public_id} is not locked; nothing changed.\n"
    assert records() == []


def test_an_unknown_conversation_is_refused_and_where_to_look_it_up(db):
    error = plumb_fails("conversation", "lock", "cnv_nothing", "--reason", "x")
    assert str(error).splitlines() == [
        "No conversation has the id 'cnv_nothing'. (conversation_not_found)",
        "Look it up with `.venv/bin/plumb note list`.",
    ]
    assert error.returncode == 1


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("room",), "required: ACTION"),
        (("room", "lock"), "required: ROOM"),
        (("message", "hide"), "required: MESSAGE_ID"),
        (("member", "mute", "ops"), "required: NAME"),
        (("conversation", "open", "x"), "invalid choice: 'open'"),
    ],
)
def test_an_incomplete_moderation_command_is_a_usage_error(db, args, expected):
    error = plumb_fails(*args)
    assert expected in str(error)
