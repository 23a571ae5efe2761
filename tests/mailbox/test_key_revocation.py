"""Revoking a project key ends every session it started (SPEC §5, "Revocations bite at once").

Through each front door (the service, the admin action, ``plumb key revoke``):
the sessions' tokens answer ``401 key_revoked``, their bound notes fall back
to their names, and sessions of other keys live on.
"""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse
from rest_framework.test import APIClient

from mailbox import services
from mailbox.errors import KeyRevoked
from mailbox.models import AuditRecord, Note, ProjectKey, Session
from tests.conftest import assert_error, client_for
from tests.factories import ProjectKeyFactory

pytestmark = pytest.mark.django_db


def client_for_key(project_key: ProjectKey) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {project_key.raw_key}")
    return client


def start(project_key: ProjectKey, name: str) -> Session:
    """A session started over REST with ``project_key``; ``raw_token`` holds its token."""
    response = client_for_key(project_key).post(
        "/api/v1/sessions/", {"workspace": "main", "name": name}, format="json"
    )
    assert response.status_code == 201, response.json()
    session = Session.objects.get(public_id=response.json()["session"]["id"])
    session.raw_token = response.json()["token"]
    return session


def revoke_with_service(key: ProjectKey) -> None:
    assert services.key_revoke(key, actor="test") == 2


def revoke_in_the_admin(key: ProjectKey, admin_client) -> None:
    response = admin_client.post(
        reverse("admin:mailbox_projectkey_changelist"),
        {"action": "revoke_keys", "_selected_action": [str(key.pk)]},
        follow=True,
    )
    shown = [str(m) for m in response.context["messages"]]
    assert shown == ["Revoked 1 key(s) and ended the 2 open session(s) they started."]


def revoke_from_the_command_line(key: ProjectKey) -> None:
    out = StringIO()
    call_command("plumb", "key", "revoke", key.prefix, stdout=out)
    assert "ended the 2 open session(s) it started" in out.getvalue()


@pytest.fixture
def door(request, admin_client):
    return {
        "service": revoke_with_service,
        "admin": lambda key: revoke_in_the_admin(key, admin_client),
        "cli": revoke_from_the_command_line,
    }[request.param]


def test_a_session_records_the_key_that_started_it(project_key, workspace):
    session = start(project_key, "alice")

    assert session.project_key_id == project_key.pk
    assert session.end_reason == ""


@pytest.mark.parametrize("door", ["service", "admin", "cli"], indirect=True)
def test_revoking_a_key_ends_its_sessions_and_their_tokens_answer_key_revoked(
    door, project_key, workspace
):
    alice, bob = start(project_key, "alice"), start(project_key, "bob")
    other_key = ProjectKeyFactory(project=workspace.project)
    carol = start(other_key, "carol")

    door(project_key)

    for session in (alice, bob):
        response = client_for(session).get("/api/v1/sessions/current/")
        assert_error(response, 401, "key_revoked")
        session.refresh_from_db()
        assert session.ended_at is not None
        assert session.end_reason == Session.EndReason.KEY_REVOKED
    # Another key's session is untouched.
    assert client_for(carol).get("/api/v1/sessions/current/").status_code == 200
    carol.refresh_from_db()
    assert (carol.ended_at, carol.end_reason) == (None, "")
    # The key itself no longer starts sessions.
    project_key.refresh_from_db()
    assert project_key.revoked_at is not None
    record = AuditRecord.objects.get(action="key.revoke")
    assert record.target == f"{project_key.display_prefix} (2 session(s) ended)"


def test_a_note_bound_to_a_revoked_session_reaches_the_names_next_session(project_key, workspace):
    alice = start(project_key, "alice")
    sender_key = ProjectKeyFactory(project=workspace.project)
    bob = start(sender_key, "bob")
    sent = client_for(bob).post("/api/v1/notes/", {"body": "for alice", "to": "alice"})
    assert sent.status_code == 201, sent.json()
    assert sent.json()["delivery"] == "session"

    assert services.key_revoke(project_key, actor="test") == 1

    note = Note.objects.get(public_id=sent.json()["note"]["id"])
    assert (note.bound_session_id, note.delivered_at) == (None, None)
    # Alice's old token is refused and receives nothing.
    assert_error(client_for(alice).get("/api/v1/notes/"), 401, "key_revoked")
    # Alice comes back with another key: the note waits for her name.
    new_key = ProjectKeyFactory(project=workspace.project)
    again = client_for_key(new_key).post(
        "/api/v1/sessions/", {"workspace": "main", "name": "alice"}, format="json"
    )
    assert again.status_code == 201, again.json()
    assert [n["id"] for n in again.json()["notes"]] == [note.public_id]
    note.refresh_from_db()
    assert note.delivered_to.public_id == again.json()["session"]["id"]


def test_revoking_twice_ends_nothing_more_and_records_once(project_key, workspace):
    start(project_key, "alice")

    assert services.key_revoke(project_key, actor="test") == 1
    assert services.key_revoke(project_key, actor="test") == 0

    assert AuditRecord.objects.filter(action="key.revoke").count() == 1


def test_sessions_ended_before_the_revocation_keep_their_reason(project_key, workspace):
    alice = start(project_key, "alice")
    client_for(alice).delete("/api/v1/sessions/current/")

    assert services.key_revoke(project_key, actor="test") == 0

    alice.refresh_from_db()
    assert alice.end_reason == Session.EndReason.ENDED
    assert_error(client_for(alice).get("/api/v1/sessions/current/"), 401, "session_ended")


def test_session_start_with_a_key_revoked_after_it_was_read_is_refused(project_key, workspace):
    stale = ProjectKey.objects.get(pk=project_key.pk)  # as authentication read it
    services.key_revoke(project_key, actor="test")

    with pytest.raises(KeyRevoked) as refused:
        services.session_start(stale, workspace_slug="main", name="alice")

    assert (refused.value.code, refused.value.status) == ("key_revoked", 401)
    assert not Session.objects.exists()
