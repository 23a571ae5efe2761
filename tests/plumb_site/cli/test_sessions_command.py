"""``plumb session list|end`` and ``plumb audit`` (SPEC §5).

Listings are checked the way a script reads them: split on runs of two or
more spaces, under their header row.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone
from rest_framework.test import APIClient

from mailbox import services
from mailbox.models import AuditRecord, Project, Session
from tests.cli import plumb, plumb_fails
from tests.conftest import assert_error, client_for
from tests.factories import (
    PersonFactory,
    ProjectKeyFactory,
    SessionFactory,
    UserFactory,
    WorkspaceFactory,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def operator(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr("getpass.getuser", lambda: "ops-alice")
    return "cli:ops-alice"


def rows(out: str) -> list[list[str]]:
    """A listing's rows, header included, split as scripts split them."""
    return [re.split(r"\s{2,}", line) for line in out.splitlines()]


SESSION_HEADER = ["NAME", "WORKSPACE", "PROJECT", "STARTED", "LAST_SEEN", "STATE", "SESSION"]


@pytest.fixture
def sessions(workspace) -> dict[str, Session]:
    """In project ``main``'s workspace: alice connected, bob ended, carol idle past the TTL;
    dave elsewhere."""
    stale = timezone.now() - timedelta(seconds=settings.PLUMB_SESSION_TTL + 60)
    return {
        "alice": SessionFactory(workspace=workspace, name="alice"),
        "bob": services.session_end(SessionFactory(workspace=workspace, name="bob")),
        "carol": SessionFactory(workspace=workspace, name="carol", last_seen_at=stale),
        "dave": SessionFactory(workspace=WorkspaceFactory(slug="far"), name="dave"),
    }


# --- session list -----------------------------------------------------------------------


def test_session_list_shows_each_session_with_its_state_and_never_its_token(sessions):
    out, err = plumb("session", "list")

    listed = rows(out)
    assert listed[0] == SESSION_HEADER
    by_name = {row[0]: row for row in listed[1:]}
    assert set(by_name) == {"alice", "bob", "carol", "dave"}
    alice = sessions["alice"]
    assert by_name["alice"] == [
        "alice",
        "main",
        alice.workspace.project.slug,
        alice.started_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        alice.last_seen_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "connected",
        alice.public_id,
    ]
    assert by_name["bob"][5] == "ended"
    assert by_name["carol"][5] == "expired"
    assert by_name["dave"][1:3] == ["far", sessions["dave"].workspace.project.slug]
    for session in sessions.values():
        assert session.raw_token not in out
        assert session.token_prefix not in out
    assert err == ""


def test_session_list_lists_newest_first(sessions):
    names = [row[0] for row in rows(plumb("session", "list")[0])[1:]]
    assert names == ["dave", "carol", "bob", "alice"]


def test_session_list_narrows_to_a_project_and_to_connected_sessions(sessions, project):
    names = {row[0] for row in rows(plumb("session", "list", project.slug)[0])[1:]}
    assert names == {"alice", "bob", "carol"}

    names = {row[0] for row in rows(plumb("session", "list", project.slug, "--connected")[0])[1:]}
    assert names == {"alice"}

    names = {row[0] for row in rows(plumb("session", "list", "--connected")[0])[1:]}
    assert names == {"alice", "dave"}


def test_session_list_stops_at_the_limit(sessions):
    listed = rows(plumb("session", "list", "--limit", "2")[0])
    assert [row[0] for row in listed[1:]] == ["dave", "carol"]


def test_session_list_of_an_unknown_project_is_refused(db):
    error = plumb_fails("session", "list", "nowhere")
    assert str(error).splitlines() == [
        "No project 'nowhere'. (project_not_found)",
        "Look it up with `.venv/bin/plumb project list`.",
    ]
    assert error.returncode == 1


def test_a_limit_below_one_is_a_usage_error(db):
    error = plumb_fails("session", "list", "--limit", "0")
    assert "argument --limit: expected at least 1, got 0" in str(error)


# --- session end ------------------------------------------------------------------------


def test_session_end_ends_the_names_session_and_records_the_operator(sessions, operator):
    alice = sessions["alice"]

    out, err = plumb("session", "end", "alice")

    assert out == (
        f"Ended session {alice.public_id} of alice (workspace main, project "
        f"{alice.workspace.project.slug}): its token now answers 401 session_ended, and its "
        "undelivered notes wait for the name.\n"
    )
    assert err == ""
    alice.refresh_from_db()
    assert alice.ended_at is not None
    assert alice.end_reason == Session.EndReason.ENDED
    assert_error(client_for(alice).get("/api/v1/sessions/current/"), 401, "session_ended")
    record = AuditRecord.objects.get(action="session.end")
    assert (record.actor, record.project_slug, record.target) == (
        operator,
        alice.workspace.project.slug,
        f"session {alice.public_id} of alice",
    )


def test_session_end_hands_a_bound_note_back_to_the_name(sessions, project):
    sender = SessionFactory(workspace=sessions["alice"].workspace)
    left = client_for(sender).post("/api/v1/notes/", {"to": "alice", "body": "ping"}, format="json")
    assert left.json()["delivery"] == "session"

    plumb("session", "end", "alice")

    key = ProjectKeyFactory(project=project)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key.raw_key}")
    started = client.post("/api/v1/sessions/", {"workspace": "main", "name": "alice"})
    assert started.status_code == 201
    assert [note["body"] for note in started.json()["notes"]] == ["ping"]


def test_session_end_without_an_open_session_changes_and_records_nothing(sessions):
    out, _ = plumb("session", "end", "bob")
    assert out == "bob has no open session; nothing changed.\n"
    assert not AuditRecord.objects.filter(action="session.end").exists()


def test_session_end_also_ends_an_expired_but_open_session(sessions):
    plumb("session", "end", "carol")
    sessions["carol"].refresh_from_db()
    assert sessions["carol"].end_reason == Session.EndReason.ENDED


def test_session_end_of_an_unknown_name_is_refused(db):
    error = plumb_fails("session", "end", "nobody")
    assert str(error).splitlines() == [
        "No agent has the name 'nobody'. (name_not_found)",
        "Look it up with `.venv/bin/plumb session list`.",
    ]
    assert error.returncode == 1


def test_an_agent_ending_its_own_session_is_not_audited(sessions):
    response = client_for(sessions["alice"]).delete("/api/v1/sessions/current/")
    assert response.status_code == 200
    assert not AuditRecord.objects.filter(action="session.end").exists()


# --- audit ------------------------------------------------------------------------------


AUDIT_HEADER = ["WHEN", "ACTOR", "ACTION", "PROJECT", "ROOM", "TARGET", "REASON"]


@pytest.fixture
def trail(db) -> list[AuditRecord]:
    """Four records, one a minute, the newest last; the project ``gone`` was deleted."""
    start = timezone.now() - timedelta(minutes=10)
    made = [
        ("cli:ops", "key.create", "acme", "", "plumb_key_abcd1234", "ci runner"),
        ("admin:mod", "room.hide", "acme", "ops", "message msg_1 (seq 3)", "leaked a\nhostname"),
        ("cli:ops", "optin.grant", "gone", "", "gone accepts acme", ""),
        ("admin:mod", "room.lock", "acme", "ops", "room", "freeze"),
    ]
    Project.objects.create(slug="acme", name="Acme")
    return [
        AuditRecord.objects.create(
            actor=actor,
            action=action,
            project_slug=project,
            room_slug=room,
            target=target,
            reason=reason,
            created_at=start + timedelta(minutes=i),
        )
        for i, (actor, action, project, room, target, reason) in enumerate(made)
    ]


def test_audit_lists_records_newest_first_one_line_each(trail):
    out, err = plumb("audit")

    listed = rows(out)
    assert listed[0] == AUDIT_HEADER
    newest = trail[-1]
    assert listed[1] == [
        newest.created_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "admin:mod",
        "room.lock",
        "acme",
        "ops",
        "room",
        "freeze",
    ]
    assert [row[2] for row in listed[1:]] == [
        "room.lock",
        "optin.grant",
        "room.hide",
        "key.create",
    ]
    # Free text is flattened to one line; an empty cell is "-".
    assert listed[3][5:] == ["message msg_1 (seq 3)", "leaked a hostname"]
    assert listed[2][4] == "-"
    assert listed[2][6] == "-"
    assert len(out.splitlines()) == 5
    assert err == ""


def test_audit_narrows_to_a_project_and_a_limit(trail):
    listed = rows(plumb("audit", "acme", "--limit", "2")[0])
    assert [row[2] for row in listed[1:]] == ["room.lock", "room.hide"]


def test_audit_lists_a_deleted_projects_records_by_slug(trail):
    listed = rows(plumb("audit", "gone")[0])
    assert [row[2] for row in listed[1:]] == ["optin.grant"]


def test_audit_defaults_to_the_newest_fifty(db):
    for i in range(55):
        AuditRecord.objects.create(actor="cli:ops", action="key.create", target=f"k{i}")
    listed = rows(plumb("audit")[0])
    assert len(listed) == 51
    assert listed[1][5] == "k54"


def test_audit_of_a_slug_that_names_nothing_is_refused(db):
    error = plumb_fails("audit", "nowhere")
    assert str(error).splitlines() == [
        "No project 'nowhere'. (project_not_found)",
        "Look it up with `.venv/bin/plumb project list`.",
    ]
    assert error.returncode == 1


def test_every_command_line_change_lands_in_the_audit_listing(sessions, operator):
    project = sessions["alice"].workspace.project.slug
    plumb("session", "end", "alice")
    plumb("key", "create", project)

    listed = rows(plumb("audit", project)[0])

    assert [(row[1], row[2]) for row in listed[1:3]] == [
        (operator, "key.create"),
        (operator, "session.end"),
    ]


def test_a_persons_session_is_listed_as_theirs_and_ending_it_changes_nothing(db):
    PersonFactory(user=UserFactory(username="ada"))
    out, _ = plumb("session", "list")
    ada = next(row for row in rows(out)[1:] if row[0] == "ada")
    assert (ada[1], ada[2], ada[5]) == ("admin", "(people)", "person")
    assert plumb("session", "list", "--connected")[0].count("\n") == 1  # the header alone
    assert plumb("session", "end", "ada")[0] == "ada has no open session; nothing changed.\n"
    assert not AuditRecord.objects.filter(action="session.end").exists()
