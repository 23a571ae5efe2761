"""Fixtures of the mailbox tests: another project, ``beta``, with a connected session,
and what the admin tests look at (one row of every model, a conversation)."""

import pytest

from mailbox.models import Conversation
from tests.factories import (
    OptInFactory,
    ProjectFactory,
    ProjectKeyFactory,
    SessionFactory,
    WorkspaceFactory,
)
from tests.mailbox.admin_pages import bearer


@pytest.fixture
def beta():
    return ProjectFactory(slug="beta")


@pytest.fixture
def beta_workspace(beta):
    return WorkspaceFactory(project=beta, slug="main")


@pytest.fixture
def bert(beta_workspace):
    """A connected session in another project."""
    return SessionFactory(workspace=beta_workspace, name="bert")


# --- the admin ------------------------------------------------------------------------


@pytest.fixture
def populated(db):
    """One row of every model, with a live session and key whose secrets are known."""
    workspace = WorkspaceFactory(slug="main")
    other = ProjectFactory(slug="other")
    optin = OptInFactory(project=workspace.project, source=other)
    session = SessionFactory(workspace=workspace, name="alice")
    key = ProjectKeyFactory(project=workspace.project, label="ci")
    return {
        "project": workspace.project,
        "crossprojectoptin": optin,
        "projectkey": key,
        "workspace": workspace,
        "agentname": session.name,
        "session": session,
    }


@pytest.fixture
def conversation(session_client, bob):
    """alice → bob: "hello **bob**", then bob's reply."""
    started = session_client.post(
        "/api/v1/notes/", {"body": "hello **bob**", "to": "bob"}, format="json"
    ).json()
    bearer(bob.raw_token).post(
        "/api/v1/notes/",
        {"body": "hi alice", "conversation_id": started["conversation_id"]},
        format="json",
    )
    return Conversation.objects.get(public_id=started["conversation_id"])
