"""History is never one ORM call from deletion (rooms): no gap in seqs, no lost messages."""

from __future__ import annotations

import pytest
from django.db.models import ProtectedError, RestrictedError

from mailbox.models import AgentName, Project
from rooms import services
from rooms.models import Event, Message, Room
from tests.factories import SessionFactory, WorkspaceFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def room_with_history():
    workspace = WorkspaceFactory(slug="history")
    alice = SessionFactory(workspace=workspace, name="alice")
    bob = SessionFactory(workspace=workspace, name="bob")
    services.room_create(alice, slug="history")
    services.room_join(bob, "history")
    services.message_send(alice, "history", body="first")
    services.message_send(bob, "history", body="second")
    return Room.objects.get(slug="history")


def test_a_name_that_wrote_in_a_room_cannot_be_deleted(room_with_history):
    with pytest.raises(ProtectedError):
        AgentName.objects.get(handle="alice").delete()
    assert Message.objects.filter(room=room_with_history).count() == 2


def test_a_message_cannot_be_deleted_alone_so_seqs_stay_gap_free(room_with_history):
    with pytest.raises(RestrictedError):
        Message.objects.filter(room=room_with_history).first().delete()
    seqs = list(Event.objects.filter(room=room_with_history).values_list("seq", flat=True))
    assert seqs == list(range(1, room_with_history.head_seq + 1))


def test_a_project_with_rooms_cannot_be_deleted(room_with_history):
    with pytest.raises(ProtectedError):
        Project.objects.get(pk=room_with_history.project_id).delete()
    assert Room.objects.filter(pk=room_with_history.pk).exists()


def test_a_whole_room_can_still_be_deleted_as_one(room_with_history):
    room_with_history.delete()
    assert not Event.objects.exists()
    assert not Message.objects.exists()
