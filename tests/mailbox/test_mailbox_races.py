"""Mailbox guarantees under races that are made to happen (tests/races.py), on both databases.

Each test holds one service's transaction open at its critical point while a
second connection acts, then lets the first go on, and checks the guarantee
against what both committed.
"""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.conf import settings
from django.utils import timezone

from mailbox import services
from mailbox.errors import ConversationExhausted, KeyRevoked, RecipientNotFound
from mailbox.models import AgentName, Note, ProjectKey, Session
from tests.conftest import assert_error, client_for
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


def test_two_claims_that_read_the_same_pending_note_deliver_it_once(workspace):
    alice = SessionFactory(workspace=workspace, name="alice")
    bob = SessionFactory(workspace=workspace, name="bob")
    note = services.note_leave(alice, body="once only", to="bob").note

    def claim():
        return services.notes_claim(Session.objects.get(pk=bob.pk))

    first, second, _ = race("claim.candidates", claim, claim)
    # The first had read the note as pending; the second claimed it meanwhile.
    held, free = first.outcome(), second.outcome()
    assert [n.public_id for n in free] == [note.public_id]
    assert held == []
    assert Note.objects.get(pk=note.pk).delivered_to_id == bob.pk


def test_replies_racing_for_the_last_exchange_never_overshoot_the_cap(workspace):
    workspace.project.max_exchanges = 2
    workspace.project.save()
    alice = SessionFactory(workspace=workspace, name="alice")
    bob = SessionFactory(workspace=workspace, name="bob")
    thread = services.note_leave(alice, body="one", to="bob").note.conversation.public_id
    first, second, state = race(
        "note.stored",
        lambda: services.note_leave(bob, body="two", conversation_id=thread),
        lambda: services.note_leave(alice, body="three", conversation_id=thread),
    )
    assert first.outcome().exchanges_left == 0
    assert state == "blocked"
    with pytest.raises(ConversationExhausted):
        second.outcome()
    assert Note.objects.filter(conversation__public_id=thread).count() == 2


def test_two_retries_racing_with_one_idempotency_key_store_one_note(workspace):
    alice = SessionFactory(workspace=workspace, name="alice")
    SessionFactory(workspace=workspace, name="bob")

    def leave():
        return services.note_leave(alice, body="the build is red", to="bob", idempotency_key="k1")

    first, second, state = race("note.stored", leave, leave)
    one, two = first.outcome(), second.outcome()
    assert state == "blocked"
    assert one.note.public_id == two.note.public_id
    assert (one.replayed, two.replayed) == (False, True)
    assert Note.objects.filter(sender_name__handle="alice").count() == 1


# --- session start vs key revoke --------------------------------------------------------


def test_a_session_started_while_its_key_is_revoked_is_ended_by_the_revocation(workspace):
    key = ProjectKeyFactory(project=workspace.project)
    first, second, state = race(
        "session.started",
        lambda: services.session_start(key, workspace_slug="races", name="alice"),
        lambda: services.key_revoke(ProjectKey.objects.get(pk=key.pk), actor="test"),
    )
    started, ended = first.outcome(), second.outcome()
    # The revocation waited for the start that held the key row...
    assert state == "blocked"
    # ...and then saw its session and ended it.
    assert ended == 1
    session = Session.objects.get(pk=started.session.pk)
    assert session.ended_at is not None
    assert session.end_reason == Session.EndReason.KEY_REVOKED
    started.session.raw_token = started.token
    response = client_for(started.session).get("/api/v1/sessions/current/")
    assert_error(response, 401, "key_revoked")
    assert not Session.objects.filter(ended_at__isnull=True).exists()


def test_a_session_start_that_waited_for_a_revocation_is_refused(workspace):
    key = ProjectKeyFactory(project=workspace.project)
    as_authenticated = ProjectKey.objects.get(pk=key.pk)  # read before the revocation
    first, second, state = race(
        "key.revoked",
        lambda: services.key_revoke(key, actor="test"),
        lambda: services.session_start(as_authenticated, workspace_slug="races", name="alice"),
    )
    assert first.outcome() == 0
    # The start waited for the revocation that held the key row, then refused.
    assert state == "blocked"
    with pytest.raises(KeyRevoked) as refused:
        second.outcome()
    assert (refused.value.status, refused.value.code) == (401, "key_revoked")
    assert not Session.objects.filter(ended_at__isnull=True).exists()
    assert not Session.objects.exists()


# --- freeing generated names --------------------------------------------------------


def _generated_and_over(workspace) -> str:
    """A generated name whose session expired long ago: names_free would free it."""
    key = ProjectKeyFactory(project=workspace.project)
    session = services.session_start(key, workspace_slug=workspace.slug).session
    past = timezone.now() - timedelta(seconds=settings.PLUMB_SESSION_TTL + 1)
    Session.objects.filter(pk=session.pk).update(last_seen_at=past)
    return session.name.handle


def test_a_note_to_a_name_being_freed_waits_and_is_refused(workspace):
    alice = SessionFactory(workspace=workspace, name="alice")
    handle = _generated_and_over(workspace)
    first, second, state = race(
        "names.checked",
        services.names_free,
        lambda: services.note_leave(alice, body="still there?", to=handle),
    )
    assert first.outcome() == 1
    # The note waited for the freeing that held the name, then found no such name:
    # refused up front, nothing stored, nothing bound to a name that is gone.
    assert state == "blocked"
    with pytest.raises(RecipientNotFound):
        second.outcome()
    assert not AgentName.objects.filter(handle=handle).exists()
    assert not Note.objects.exists()


def test_a_name_that_gets_a_note_while_it_is_being_freed_is_kept(workspace):
    alice = SessionFactory(workspace=workspace, name="alice")
    handle = _generated_and_over(workspace)
    first, second, state = race(
        "note.stored",
        lambda: services.note_leave(alice, body="still there?", to=handle),
        services.names_free,
    )
    left = first.outcome()
    # The freeing waited for the note that held the name, then saw it.
    assert second.outcome() == 0
    assert state == "blocked"
    name = AgentName.objects.get(handle=handle)
    assert not name.disposable
    assert Note.objects.get(pk=left.note.pk).recipient == name


def test_a_start_under_a_name_being_freed_waits_and_claims_it_afresh(workspace):
    handle = _generated_and_over(workspace)
    old = AgentName.objects.get(handle=handle)
    key = ProjectKeyFactory(project=workspace.project)
    first, second, state = race(
        "names.checked",
        services.names_free,
        lambda: services.session_start(key, workspace_slug="races", name=handle),
    )
    assert first.outcome() == 1
    started = second.outcome()
    assert state == "blocked"
    # A new row: nothing of the old holder's (its sessions) came along.
    name = AgentName.objects.get(handle=handle)
    assert name.pk != old.pk
    assert not name.disposable  # claimed by name
    assert list(Session.objects.values_list("pk", flat=True)) == [started.session.pk]


def test_two_generated_starts_at_once_never_get_the_same_name(workspace, monkeypatch):
    # Every draw is the same: both starts want amber-badger-10.
    fixed = SimpleNamespace(choice=lambda words: words[0], randbelow=lambda _: 0)
    monkeypatch.setattr("mailbox.services.sessions.secrets", fixed)
    # Two keys, so that the second start does not queue behind the first's key lock.
    one = ProjectKeyFactory(project=workspace.project)
    two = ProjectKeyFactory(project=workspace.project)
    first, second, state = race(
        "session.started",
        lambda: services.session_start(one, workspace_slug="races"),
        lambda: services.session_start(two, workspace_slug="races"),
    )
    a, b = first.outcome().session, second.outcome().session
    # The second waited for the first's uncommitted name, then drew a longer one.
    assert state == "blocked"
    assert (a.name.handle, b.name.handle) == ("amber-badger-10", "amber-badger-1000")
    assert AgentName.objects.count() == 2
