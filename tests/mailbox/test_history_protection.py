"""History is never one ORM call from deletion (mailbox): a thread keeps every note."""

from __future__ import annotations

import pytest
from django.db.models import ProtectedError

from mailbox import services
from mailbox.models import AgentName, Note, Workspace
from tests.factories import SessionFactory, WorkspaceFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def thread():
    workspace = WorkspaceFactory(slug="history")
    alice = SessionFactory(workspace=workspace, name="alice")
    SessionFactory(workspace=workspace, name="bob")
    services.note_leave(alice, body="to bob", to="bob")
    services.note_leave(alice, body="to whoever comes next")
    return workspace


@pytest.mark.parametrize("handle", ["alice", "bob"], ids=["sender", "recipient"])
def test_a_name_in_a_thread_cannot_be_deleted(thread, handle):
    with pytest.raises(ProtectedError):
        AgentName.objects.get(handle=handle).delete()
    assert Note.objects.count() == 2


def test_a_workspace_with_next_notes_cannot_be_deleted(thread):
    with pytest.raises(ProtectedError):
        Workspace.objects.get(pk=thread.pk).delete()
    assert Note.objects.count() == 2
