"""Mailbox guarantees under races that are made to happen (tests/races.py), on both databases.

Each test holds one service's transaction open at its critical point while a
second connection acts, then lets the first go on, and checks the guarantee
against what both committed.
"""

from __future__ import annotations

import pytest

from mailbox import services
from mailbox.models import Note, Session
from tests.factories import ProjectKeyFactory, SessionFactory, WorkspaceFactory
from tests.races import race

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def workspace():
    return WorkspaceFactory(slug="races")


def test_a_note_bound_while_its_session_ends_falls_back_to_the_name(workspace):
    alice = SessionFactory(workspace=workspace, name="alice")
    bob = SessionFactory(workspace=workspace, name="bob")
    first, second, state = race(
        "note.stored",
        lambda: services.note_leave(alice, body="for bob", to="bob"),
        lambda: services.session_end(Session.objects.get(pk=bob.pk)),
    )
    left = first.outcome()
    second.outcome()
    # session_end had to wait for the note that was being bound to its session.
    assert state == "blocked"
    assert left.delivery == "session"
    note = Note.objects.get(pk=left.note.pk)
    assert note.bound_session_id is None, "the note stayed bound to an ended session"
    # The name's next session receives it.
    key = ProjectKeyFactory(project=workspace.project)
    started = services.session_start(key, workspace_slug="races", name="bob")
    assert [n.public_id for n in services.notes_claim(started.session)] == [note.public_id]
