"""HEAD has no effect (SPEC §2): it never delivers a note, moves a read position
or touches a session.

Django answers HEAD with a view's GET handler and drops the body; on a call
that delivers notes into that body they would be marked delivered and lost.
So every view that takes a credential refuses HEAD with ``405`` before the
credential is read, and says which methods it answers; views without one
(the schema, the fingerprint, health) answer HEAD like GET. A real server
drops the body too: ``tests/scale/test_head_requests.py``.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone

from mailbox.models import Note, Session
from mailbox.services import note_leave
from rooms.models import Member
from rooms.services import message_send, room_create, room_join
from tests.conftest import assert_error
from tests.factories import SessionFactory
from tests.plumb_site.test_every_endpoint import OPERATIONS

pytestmark = pytest.mark.django_db

SESSION_GETS = sorted(
    {
        path
        for path, method, operation in OPERATIONS
        if method == "GET" and operation.get("security")
    }
    - {
        path
        for path, method, operation in OPERATIONS
        if method == "GET" and operation.get("security") == [{}]
    }
)


@pytest.fixture
def world(workspace):
    alice = SessionFactory(workspace=workspace, name="alice")
    bob = SessionFactory(workspace=workspace, name="bob")
    room = room_create(alice, slug="lab").room
    room_join(bob, "lab")
    message = message_send(alice, "lab", body="first").message
    note_leave(alice, body="for bob", to="bob")
    # Seen a while ago, still connected: a touch of last_seen_at would show.
    seen = timezone.now() - timedelta(seconds=settings.PLUMB_SESSION_TTL // 2)
    assert settings.PLUMB_SESSION_TTL // 2 > settings.PLUMB_SEEN_WRITE_INTERVAL
    Session.objects.filter(pk=bob.pk).update(last_seen_at=seen)
    return {"bob": bob, "slug": room.slug, "message": message.public_id, "room": room}


def _path(template: str, world: dict) -> str:
    return (
        template.replace("{slug}", world["slug"])
        .replace("{message_id}", world["message"])
        .replace("{id}", world["message"])
        .replace("{conversation_id}", Note.objects.first().conversation.public_id)
    )


def test_there_are_session_reads_to_check():
    assert "/api/v1/notes/" in SESSION_GETS
    assert "/api/v1/sessions/current/" in SESSION_GETS


@pytest.mark.parametrize("template", SESSION_GETS)
def test_head_on_a_session_read_is_refused_and_changes_nothing(world, template):
    bob = world["bob"]
    seen = Session.objects.get(pk=bob.pk).last_seen_at
    read_seq = Member.objects.get(room=world["room"], name=bob.name).read_seq

    response = Client().head(_path(template, world), HTTP_AUTHORIZATION=f"Bearer {bob.raw_token}")

    assert response.status_code == 405
    assert "HEAD" not in response["Allow"]
    assert "GET" in response["Allow"]
    assert Session.objects.get(pk=bob.pk).last_seen_at == seen
    assert Note.objects.filter(delivered_at__isnull=False).count() == 0
    assert Member.objects.get(room=world["room"], name=bob.name).read_seq == read_seq


def test_after_a_head_the_note_is_still_delivered_by_get(world):
    bob = world["bob"]
    Client().head("/api/v1/notes/", HTTP_AUTHORIZATION=f"Bearer {bob.raw_token}")

    response = Client().get("/api/v1/notes/", HTTP_AUTHORIZATION=f"Bearer {bob.raw_token}")

    assert [n["body"] for n in response.json()["notes"]] == ["for bob"]


def test_head_on_a_key_call_is_refused_before_the_key_is_read(project_key):
    response = Client().head(
        "/api/v1/sessions/", HTTP_AUTHORIZATION=f"Bearer {project_key.raw_key}"
    )

    assert response.status_code == 405  # a HEAD answer has no body to read
    project_key.refresh_from_db()
    assert project_key.last_used_at is None


def test_another_method_a_view_does_not_answer_touches_nothing_either(world):
    bob = world["bob"]
    seen = Session.objects.get(pk=bob.pk).last_seen_at

    response = Client().put("/api/v1/notes/", HTTP_AUTHORIZATION=f"Bearer {bob.raw_token}")

    assert_error(response, 405, "method_not_allowed")
    assert Session.objects.get(pk=bob.pk).last_seen_at == seen


@pytest.mark.parametrize("path", ["/api/v1/schema/fingerprint/", "/healthz", "/"])
def test_head_without_a_credential_answers_like_get(db, path):
    assert Client().head(path).status_code == 200
