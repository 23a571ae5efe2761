"""Notes are built as plain dicts (``mailbox.representation.note_json``): these
tests hold each one to the fields ``NoteSerializer`` declares for the schema, in
the same order, and to the bytes DRF's own field machinery renders for the
same note: left by name and for "next", waiting, delivered and bounced, in a
reply, and plumb's own notice of a bounce. Sessions (``session_json``) are held
to ``SessionSerializer`` the same way, live and ended.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from rest_framework import serializers
from rest_framework.renderers import JSONRenderer

from mailbox import representation as r
from mailbox import services
from mailbox.models import Note, Session
from mailbox.representation import NoteSerializer, SessionSerializer
from mailbox.selectors import conversation_get_for_session
from tests.conftest import client_for

pytestmark = pytest.mark.django_db


def drf(instance: object) -> dict:
    """What DRF's generic per-field machinery makes of ``instance``."""
    return serializers.Serializer.to_representation(NoteSerializer(), instance)


def rendered(data: object) -> bytes:
    return JSONRenderer().render(data)


@pytest.fixture
def notes(alice, bob) -> list[Note]:
    """A named note and its reply (delivered), and a "next" note (waiting)."""
    first = services.note_leave(alice, to="bob", body="build 1432 is green").note
    services.notes_claim(bob)
    services.note_leave(
        bob, conversation_id=first.conversation.public_id, body="thanks \u00e9\u200b"
    )
    services.note_leave(alice, to="next", body="for whoever comes next")
    return list(
        Note.objects.select_related(
            "conversation", "recipient", "next_workspace", "sender_name__workspace__project"
        ).order_by("id")
    )


def test_the_notes_cover_named_next_waiting_and_delivered(notes):
    assert [n.to_display for n in notes] == ["bob", "alice", "next"]
    assert [n.delivered_at is not None for n in notes] == [True, False, False]
    assert [n.position for n in notes] == [1, 2, 1]


def test_every_note_has_its_serializers_fields_in_order_and_drfs_bytes(notes):
    for note in notes:
        out = r.note_json(note)
        assert list(out) == list(NoteSerializer().fields)
        assert rendered(out) == rendered(drf(note))
        assert rendered(NoteSerializer(note).data) == rendered(out)


def test_a_left_note_answers_what_drf_renders(alice, bob):
    response = client_for(alice).post("/api/v1/notes/", {"to": "bob", "body": "hi"}, format="json")
    assert response.status_code == 201
    stored = Note.objects.select_related(
        "conversation", "recipient", "sender_name__workspace__project"
    ).get()
    assert response.json()["note"] == drf(stored)


def test_delivered_notes_answer_what_drf_renders(alice, bob):
    services.note_leave(alice, to="bob", body="one")
    services.note_leave(alice, to="bob", body="two")
    response = client_for(bob).get("/api/v1/notes/")
    assert response.status_code == 200
    stored = Note.objects.select_related(
        "conversation", "recipient", "sender_name__workspace__project"
    ).order_by("id")
    assert [n["body"] for n in response.json()["notes"]] == ["one", "two"]
    assert response.json()["notes"] == [drf(n) for n in stored]


def test_a_thread_lists_its_notes_as_drf_renders_them(notes, alice):
    conversation = conversation_get_for_session(alice, notes[0].conversation.public_id)
    body = r.conversation_detail_body(conversation)
    assert body["conversation"]["notes"] == [drf(n) for n in notes[:2]]


def test_bounced_notes_and_plumbs_notices_answer_what_drf_renders(alice, bob):
    named = services.note_leave(alice, to="bob", body="anyone there?").note
    services.notes_claim(bob)
    reply = services.note_leave(bob, conversation_id=named.conversation.public_id, body="yes")
    services.notes_bounce(now=reply.note.created_at + timedelta(days=8))
    stored = list(
        Note.objects.select_related(
            "conversation",
            "recipient",
            "next_workspace",
            "sender_name__workspace__project",
            "delivered_to__name",
        ).order_by("position")
    )

    assert [n.state for n in stored] == ["delivered", "bounced", "waiting"]
    for note in stored:
        out = r.note_json(note)
        assert list(out) == list(NoteSerializer().fields)
        assert rendered(out) == rendered(drf(note))
    delivered, bounced, notice = (r.note_json(n) for n in stored)
    assert delivered["delivered_to"] == {"name": "bob", "kind": "agent"}
    assert (bounced["delivered_at"], bounced["delivered_to"]) == (None, None)
    assert notice["from"] == {"name": "plumb", "workspace": None, "project": None, "kind": "system"}
    assert notice["bounce_of"] == bounced["id"]


def test_sessions_live_and_ended_have_their_serializers_fields_in_order_and_drfs_bytes(alice, bob):
    services.session_end(alice)
    sessions = Session.objects.select_related("name", "workspace__project").order_by("id")
    assert [s.ended_at is None for s in sessions] == [False, True]
    for session in sessions:
        out = r.session_json(session)
        assert list(out) == list(SessionSerializer().fields)
        assert rendered(out) == rendered(SessionSerializer(session).data)
