"""Workspaces, agent names and sessions in the admin: workspaces added, names reserved,
sessions listed and ended through the services.
"""

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from mailbox import services
from mailbox.models import AgentName, AuditRecord, Workspace
from tests.factories import AgentNameFactory, SessionFactory
from tests.mailbox.admin_pages import bearer, html, url

pytestmark = pytest.mark.django_db


# --- workspaces and names -------------------------------------------------------------


def test_workspace_added_in_the_admin(admin_client, project):
    response = admin_client.post(
        url("workspace", "add"), {"project": str(project.pk), "slug": "ci"}
    )
    assert response.status_code == 302
    assert Workspace.objects.filter(project=project, slug="ci").exists()


def test_duplicate_workspace_is_refused_with_a_form_error(admin_client, workspace):
    response = admin_client.post(
        url("workspace", "add"), {"project": str(workspace.project_id), "slug": workspace.slug}
    )
    assert response.status_code == 200
    assert response.context["adminform"].form.errors
    assert Workspace.objects.count() == 1


def test_agent_names_list_their_workspace_and_project(admin_client, workspace):
    AgentNameFactory(handle="bob", workspace=workspace)
    response = admin_client.get(url("agentname", "changelist"), {"q": "bob"})
    assert [n.handle for n in response.context["cl"].result_list] == ["bob"]
    assert f"{workspace.project.slug}/{workspace.slug}" in html(response)


def test_agent_name_can_be_reserved_for_a_workspace(admin_client, workspace):
    response = admin_client.post(
        url("agentname", "add"), {"handle": "reviewer", "workspace": str(workspace.pk)}
    )
    assert response.status_code == 302
    assert AgentName.objects.get(handle="reviewer").workspace == workspace


def test_the_reserved_name_next_cannot_be_reserved_in_the_admin(admin_client, workspace):
    response = admin_client.post(
        url("agentname", "add"), {"handle": "next", "workspace": str(workspace.pk)}
    )

    assert response.status_code == 200
    assert "handle" in response.context["adminform"].form.errors
    assert not AgentName.objects.exists()


# --- sessions -------------------------------------------------------------------------


def test_end_action_ends_sessions_and_their_tokens_stop_working(admin_client, workspace):
    alice = SessionFactory(workspace=workspace, name="alice")
    bob = SessionFactory(workspace=workspace, name="bob")
    response = admin_client.post(
        url("session", "changelist"),
        {"action": "end_sessions", "_selected_action": [str(alice.pk)]},
    )
    assert response.status_code == 302
    alice.refresh_from_db()
    bob.refresh_from_db()
    assert alice.ended_at is not None
    assert bob.ended_at is None

    refused = bearer(alice.raw_token).get("/api/v1/sessions/current/")
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "session_ended"
    assert bearer(bob.raw_token).get("/api/v1/sessions/current/").status_code == 200


def test_end_action_records_the_operator_for_each_session_it_ended(
    admin_client, admin_user, workspace
):
    alice = SessionFactory(workspace=workspace, name="alice")
    gone = services.session_end(SessionFactory(workspace=workspace, name="gone"))

    admin_client.post(
        url("session", "changelist"),
        {"action": "end_sessions", "_selected_action": [str(alice.pk), str(gone.pk)]},
    )

    assert list(
        AuditRecord.objects.filter(action="session.end").values_list(
            "actor", "project_slug", "target"
        )
    ) == [
        (
            f"admin:{admin_user.username}",
            workspace.project.slug,
            f"session {alice.public_id} of alice",
        )
    ]


def test_connected_filter_keeps_only_connected_sessions(admin_client, workspace):
    stale = timezone.now() - timedelta(seconds=settings.PLUMB_SESSION_TTL + 60)
    connected = SessionFactory(workspace=workspace, name="live")
    ended = services.session_end(SessionFactory(workspace=workspace, name="gone"))
    expired = SessionFactory(workspace=workspace, name="idle", last_seen_at=stale)

    response = admin_client.get(url("session", "changelist"), {"connected": "yes"})
    assert list(response.context["cl"].result_list) == [connected]
    response = admin_client.get(url("session", "changelist"), {"connected": "no"})
    assert set(response.context["cl"].result_list) == {ended, expired}


def test_session_change_page_is_view_only(admin_client, agent_session):
    response = admin_client.post(
        url("session", "change", agent_session.pk),
        {"ended_at_0": "2020-01-01", "ended_at_1": "00:00:00"},
    )
    assert response.status_code == 403
    agent_session.refresh_from_db()
    assert agent_session.ended_at is None
