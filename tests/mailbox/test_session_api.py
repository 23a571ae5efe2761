"""POST /api/v1/sessions/, GET and DELETE /api/v1/sessions/current/ (SPEC §3.1)."""

import itertools
import re
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from mailbox.models import AgentName, Session
from tests.conftest import client_for
from tests.factories import ProjectKeyFactory, SessionFactory, WorkspaceFactory

pytestmark = pytest.mark.django_db

HANDLE_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


def start(client, **body):
    return client.post("/api/v1/sessions/", body, format="json")


def test_session_start_returns_session_token_and_notes(key_client, workspace):
    response = start(key_client, workspace="main", name="bob")

    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["session"]["name"] == "bob"
    assert body["session"]["workspace"] == "main"
    assert body["session"]["project"] == workspace.project.slug
    assert body["session"]["id"].startswith("ses_")
    assert body["session"]["started_at"].endswith("Z")
    assert body["token"].startswith("plumb_tok_")
    assert body["notes"] == []
    session = Session.objects.get(public_id=body["session"]["id"])
    assert session.name.handle == "bob"
    assert session.name.workspace == workspace


def test_the_returned_token_authenticates_session_calls(key_client, workspace):
    token = start(key_client, workspace="main", name="bob").json()["token"]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")

    response = client.get("/api/v1/sessions/current/")

    assert response.status_code == 200
    assert response.json()["session"]["name"] == "bob"
    assert response.json()["notes"] == []


def test_session_start_without_a_name_generates_a_readable_free_one(key_client, workspace):
    names = {start(key_client, workspace="main").json()["session"]["name"] for _ in range(5)}

    assert len(names) == 5
    for name in names:
        assert HANDLE_RE.match(name)
        adjective, animal, number = name.split("-")
        assert adjective.isalpha()
        assert animal.isalpha()
        assert number.isdigit()
    assert AgentName.objects.filter(handle__in=names, workspace=workspace).count() == 5


def test_the_reserved_name_next_cannot_be_claimed(key_client, workspace):
    """``next`` addresses whoever attaches next (SPEC §1): a session by that name
    could never be reached by a note."""
    response = start(key_client, workspace="main", name="next")

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert set(error["details"]) == {"name"}
    assert not Session.objects.exists()
    assert not AgentName.objects.exists()


def test_a_generated_name_is_never_a_reserved_one(key_client, workspace, monkeypatch):
    # The generator's draws, fixed: first "amber-badger-10", then "amber-badger-42"
    # ever after; the first is made reserved, so it must be passed over.
    numbers = itertools.chain([0], itertools.repeat(32))
    fixed = SimpleNamespace(choice=lambda words: words[0], randbelow=lambda _: next(numbers))
    monkeypatch.setattr("mailbox.services.sessions.secrets", fixed)
    monkeypatch.setattr("common.limits.RESERVED_NAMES", frozenset({"next", "amber-badger-10"}))

    response = start(key_client, workspace="main")

    assert response.status_code == 201, response.json()
    assert response.json()["session"]["name"] == "amber-badger-42"
    assert list(AgentName.objects.values_list("handle", flat=True)) == ["amber-badger-42"]


def test_trailing_slash_is_optional(key_client, workspace):
    assert key_client.post("/api/v1/sessions", {"workspace": "main"}).status_code == 201


def test_unknown_workspace_is_refused_with_workspace_not_found(key_client, workspace):
    response = start(key_client, workspace="nope", name="bob")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "workspace_not_found"
    assert not AgentName.objects.filter(handle="bob").exists()


def test_a_workspace_of_another_project_is_not_found(key_client, workspace):
    WorkspaceFactory(slug="elsewhere")

    response = start(key_client, workspace="elsewhere", name="bob")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "workspace_not_found"


def test_a_name_held_by_a_connected_session_is_refused_with_name_in_use(key_client, agent_session):
    response = start(key_client, workspace="main", name="alice")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "name_in_use"
    assert Session.objects.filter(name__handle="alice").count() == 1


def test_a_name_bound_to_another_workspace_is_refused_with_name_taken(
    key_client, workspace, project
):
    other = WorkspaceFactory(project=project, slug="other")
    SessionFactory(workspace=other, name="carol")
    Session.objects.update(ended_at=timezone.now())

    response = start(key_client, workspace="main", name="carol")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "name_taken"
    assert AgentName.objects.get(handle="carol").workspace == other


def test_a_name_is_free_again_once_its_session_ended(key_client, agent_session, session_client):
    assert session_client.delete("/api/v1/sessions/current/").status_code == 200

    response = start(key_client, workspace="main", name="alice")

    assert response.status_code == 201
    assert Session.objects.filter(name__handle="alice").count() == 2


def test_a_name_whose_session_went_stale_is_reclaimed_and_the_old_token_dies(
    key_client, agent_session, session_client, settings
):
    stale = timezone.now() - timedelta(seconds=settings.PLUMB_SESSION_TTL + 1)
    Session.objects.filter(pk=agent_session.pk).update(last_seen_at=stale)

    response = start(key_client, workspace="main", name="alice")

    assert response.status_code == 201
    agent_session.refresh_from_db()
    assert agent_session.ended_at is not None
    old = session_client.get("/api/v1/sessions/current/")
    assert old.status_code == 401
    assert old.json()["error"]["code"] == "session_ended"


@pytest.mark.parametrize(
    "name", ["Alice", "al ice", "-alice", ".alice", "a" * 65, "alice!", "", "ålice", 42, ["a"]]
)
def test_a_malformed_name_is_a_validation_error(key_client, workspace, name):
    response = start(key_client, workspace="main", name=name)

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert "name" in error["details"]
    assert Session.objects.count() == 0


@pytest.mark.parametrize("slug", ["Main", "ma in", "", None, 7])
def test_a_malformed_workspace_is_a_validation_error(key_client, workspace, slug):
    response = start(key_client, workspace=slug)

    assert response.status_code == 400
    assert "workspace" in response.json()["error"]["details"]


def test_current_returns_the_calling_session(session_client, agent_session):
    response = session_client.get("/api/v1/sessions/current/")

    assert response.status_code == 200
    session = response.json()["session"]
    assert session["id"] == agent_session.public_id
    assert session["ended_at"] is None


def test_ending_a_session_makes_its_token_stop_working(session_client, agent_session):
    response = session_client.delete("/api/v1/sessions/current/")

    assert response.status_code == 200
    assert response.json()["session"]["ended_at"] is not None
    assert response.json()["notes"] == []
    agent_session.refresh_from_db()
    assert agent_session.ended_at is not None
    after = session_client.get("/api/v1/sessions/current/")
    assert after.status_code == 401
    assert after.json()["error"]["code"] == "session_ended"


def test_an_expired_session_token_is_refused_with_session_expired(
    session_client, agent_session, settings
):
    stale = timezone.now() - timedelta(seconds=settings.PLUMB_SESSION_TTL + 1)
    Session.objects.filter(pk=agent_session.pk).update(last_seen_at=stale)

    response = session_client.get("/api/v1/sessions/current/")

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "session_expired"


def test_a_revoked_key_cannot_start_sessions(key_client, project_key, workspace):
    project_key.revoked_at = timezone.now()
    project_key.save()

    response = start(key_client, workspace="main", name="bob")

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "key_revoked"
    assert Session.objects.count() == 0


def test_a_session_started_by_a_later_revoked_key_keeps_working(key_client, project_key, workspace):
    token = start(key_client, workspace="main", name="bob").json()["token"]
    project_key.revoked_at = timezone.now()
    project_key.save()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")

    assert client.get("/api/v1/sessions/current/").status_code == 200


def test_a_key_of_one_project_cannot_start_sessions_in_another(workspace):
    other_key = ProjectKeyFactory()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {other_key.raw_key}")

    response = start(client, workspace="main", name="bob")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "workspace_not_found"


def test_using_a_key_records_last_used_at(key_client, project_key, workspace):
    assert project_key.last_used_at is None

    start(key_client, workspace="main", name="bob")

    project_key.refresh_from_db()
    assert project_key.last_used_at is not None


def test_last_seen_at_is_refreshed_without_a_write_on_every_request(agent_session, session_client):
    long_ago = timezone.now() - timedelta(seconds=60)
    Session.objects.filter(pk=agent_session.pk).update(last_seen_at=long_ago)

    with CaptureQueriesContext(connection) as first:
        session_client.get("/api/v1/sessions/current/")
    agent_session.refresh_from_db()
    assert agent_session.last_seen_at > long_ago
    refreshed = agent_session.last_seen_at

    # Within the write interval: authentication (which also asks whether notes
    # wait), no write.
    with CaptureQueriesContext(connection) as second:
        session_client.get("/api/v1/sessions/current/")
    agent_session.refresh_from_db()
    assert agent_session.last_seen_at == refreshed
    assert [q for q in first.captured_queries if q["sql"].startswith("UPDATE")]
    assert not [q for q in second.captured_queries if not q["sql"].startswith("SELECT")]
    assert len(second.captured_queries) == 1


def test_two_sessions_of_different_names_coexist_in_a_workspace(workspace):
    first = SessionFactory(workspace=workspace, name="one")
    second = SessionFactory(workspace=workspace, name="two")

    assert client_for(first).get("/api/v1/sessions/current/").status_code == 200
    assert client_for(second).get("/api/v1/sessions/current/").status_code == 200


def test_starting_a_session_under_a_new_name_takes_eight_statements(
    key_client, workspace, django_assert_num_queries
):
    # A key records its use once a minute: that write is behind us.
    assert key_client.post("/api/v1/sessions/", {"workspace": workspace.slug}).status_code == 201
    # The key with its project; the workspace with its project; the key locked
    # (revoked?); the name, locked (absent); the name inserted; the newest note
    # (the watermark); the session inserted; then the envelope's look for notes
    # waiting for the new session. (Plus the test transaction's savepoint pair.)
    with django_assert_num_queries(8 + 2):
        response = key_client.post(
            "/api/v1/sessions/", {"workspace": workspace.slug, "name": "newcomer"}, format="json"
        )
    assert response.status_code == 201, response.json()
