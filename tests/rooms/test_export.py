"""A project's export as JSON Lines (SPEC §8): what the API shows, line for line."""

from __future__ import annotations

import json

import pytest

from mailbox import services as mailbox_services
from rooms import services
from rooms.models import Message
from tests.cli import plumb, plumb_fails
from tests.conftest import client_for

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("_no_rate_limits")]


@pytest.fixture
def stored(alice, bob, carol):
    services.room_create(alice, slug="lab", title="Lab", topic="the lab")
    services.room_join(bob, "lab", display_name="Bob")
    first = services.message_send(alice, "lab", body="hello @bob").message
    services.review_add(bob, "lab", first.public_id, verdict="approve", body="**yes**")
    services.message_send(bob, "lab", body="a reply", reply_to=first.public_id)
    services.room_create(carol, slug="den")
    services.message_send(carol, "den", body="elsewhere")
    thread = mailbox_services.note_leave(alice, body="a note", to="bob").note.conversation
    mailbox_services.notes_claim(bob)
    mailbox_services.note_leave(bob, body="an answer", conversation_id=thread.public_id)
    mailbox_services.note_leave(carol, body="to next", to="next")
    return {"thread": thread.public_id, "first": first}


def export(*args: str) -> list[dict]:
    out, _ = plumb("export", *args)
    assert out.endswith("\n")
    return [json.loads(line) for line in out.splitlines()]


def api_events(session, slug: str) -> list[dict]:
    body = client_for(session).get(f"/api/v1/rooms/{slug}/messages/?after_seq=0&limit=500")
    return body.json()["events"]


def test_the_export_holds_what_the_api_returns_for_the_same_rooms_and_threads(
    bob, carol, project, stored
):
    lines = export(project.slug)

    assert [line["type"] for line in lines[:1]] == ["project"]
    assert {line["type"] for line in lines} == {
        "project",
        "room",
        "member",
        "event",
        "conversation",
        "note",
    }
    # Readers with no note pending: a read through the API would deliver it.
    for slug, reader in (("lab", bob), ("den", carol)):
        exported = [
            {k: v for k, v in line.items() if k not in ("type", "room")}
            for line in lines
            if line["type"] == "event" and line["room"] == slug
        ]
        assert exported == api_events(reader, slug)
    thread = client_for(bob).get(f"/api/v1/conversations/{stored['thread']}/").json()
    exported_notes = [
        {k: v for k, v in line.items() if k != "type"}
        for line in lines
        if line["type"] == "note" and line["conversation_id"] == stored["thread"]
    ]
    assert exported_notes == thread["conversation"]["notes"]
    [room] = [line for line in lines if line["type"] == "room" and line["slug"] == "lab"]
    assert room == {
        "type": "room",
        "slug": "lab",
        "title": "Lab",
        "topic": "the lab",
        "locked": False,
        "latest_seq": 5,
        "history_starts_at": 1,
        "created_at": room["created_at"],
    }
    members = [
        line["handle"] for line in lines if line["type"] == "member" and line["room"] == "lab"
    ]
    assert members == ["alice", "bob"]


def test_a_hidden_message_is_exported_with_its_stored_body(alice, project, stored):
    services.message_hide(stored["first"], actor="test", reason="off topic")
    [line] = [
        line
        for line in export(project.slug, "--room", "lab")
        if line["type"] == "event" and line["seq"] == 3
    ]
    assert line["message"]["hidden"] is True
    assert line["message"]["body"] == "hello @bob"
    assert line["message"]["hidden_reason"] == "off topic"


def test_room_conversation_and_since_narrow_the_export(project, stored):
    only_room = export(project.slug, "--room", "den")
    assert {line["type"] for line in only_room} == {"project", "room", "member", "event"}
    assert {line.get("room", line.get("slug")) for line in only_room[1:]} == {"den"}

    only_thread = export(project.slug, "--conversation", stored["thread"])
    assert [line["type"] for line in only_thread] == ["project", "conversation", "note", "note"]

    latest = Message.objects.order_by("-pk").first()
    since = latest.created_at.isoformat()
    recent = export(project.slug, "--since", since)
    assert [line["message"]["body"] for line in recent if line["type"] == "event"] == ["elsewhere"]
    assert recent[0]["since"] is not None


def test_an_unknown_room_or_thread_is_an_error_before_any_line(project, stored):
    assert "room_not_found" in str(plumb_fails("export", project.slug, "--room", "nowhere"))
    error = plumb_fails("export", project.slug, "--conversation", "cnv_nothing")
    assert "conversation_not_found" in str(error)
    assert "expected an ISO 8601 time" in str(
        plumb_fails("export", project.slug, "--since", "soon")
    )
