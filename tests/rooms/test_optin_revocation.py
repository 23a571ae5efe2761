"""Revoking an opt-in removes the other project's members from this project's rooms
(SPEC §5, "Revocations bite at once").

Project Q accepts P (and R). P's agent pete joined two of Q's rooms. Once Q
revokes its opt-in for P, through any front door, pete is out of both
rooms: a ``moderation`` event (``remove``, reason "opt-in revoked") in each
stream, ``403 not_a_member`` on send and read. R's agent and threads already
consented to are untouched.
"""

from __future__ import annotations

from io import StringIO
from types import SimpleNamespace

import pytest
from django.core.management import call_command
from django.urls import reverse

from mailbox import services as mailbox_services
from mailbox.models import AuditRecord, CrossProjectOptIn, Project
from rooms.models import Event, Member
from tests.conftest import assert_error, client_for
from tests.factories import OptInFactory, ProjectFactory, SessionFactory, WorkspaceFactory
from tests.mailbox.admin_pages import optin_inline_data, project_form_data

pytestmark = pytest.mark.django_db

ROOMS = ("ops", "lab")


@pytest.fixture
def world() -> SimpleNamespace:
    """Q with rooms ops and lab; pete (P) and ralph (R) joined both under Q's opt-ins."""
    q, p, r = (ProjectFactory(slug=slug) for slug in ("q", "p", "r"))
    world = SimpleNamespace(
        q=q,
        p=p,
        quinn=SessionFactory(workspace=WorkspaceFactory(project=q, slug="qw"), name="quinn"),
        pete=SessionFactory(workspace=WorkspaceFactory(project=p, slug="pw"), name="pete"),
        ralph=SessionFactory(workspace=WorkspaceFactory(project=r, slug="rw"), name="ralph"),
        optin=OptInFactory(project=q, source=p),
    )
    OptInFactory(project=q, source=r)
    for slug in ROOMS:
        created = client_for(world.quinn).post("/api/v1/rooms/", {"slug": slug}, format="json")
        assert created.status_code == 201, created.json()
        for guest in (world.pete, world.ralph):
            joined = client_for(guest).post(f"/api/v1/rooms/{slug}/join", {}, format="json")
            assert joined.status_code == 201, joined.json()
    return world


def send(session, slug: str, body: str = "hello"):
    return client_for(session).post(f"/api/v1/rooms/{slug}/messages/", {"body": body})


def read(session, slug: str):
    return client_for(session).get(f"/api/v1/rooms/{slug}/messages/?after_seq=0")


def revoke_with_service(world: SimpleNamespace, admin_client) -> str:
    mailbox_services.optin_revoke(world.q, source=world.p, actor="ops:script")
    return "ops:script"


def revoke_from_the_command_line(world: SimpleNamespace, admin_client) -> str:
    out = StringIO()
    call_command("plumb", "optin", "revoke", "q", "--from", "p", stdout=out)
    assert "Agents of p were removed from every room of q" in out.getvalue()
    return "cli:ops-alice"


def revoke_on_the_optin_delete_page(world: SimpleNamespace, admin_client) -> str:
    url = reverse("admin:mailbox_crossprojectoptin_delete", args=[world.optin.pk])
    assert admin_client.post(url, {"post": "yes"}).status_code == 302
    return "admin:admin"


def revoke_in_the_project_inline(world: SimpleNamespace, admin_client) -> str:
    # Q's opt-in for R is the second inline row; only P's is deleted.
    r_optin = CrossProjectOptIn.objects.get(project=world.q, source__slug="r")
    data = {**project_form_data(world.q), **optin_inline_data(initial=[world.optin, r_optin])}
    data["optins-0-DELETE"] = "on"
    url = reverse("admin:mailbox_project_change", args=[world.q.pk])
    assert admin_client.post(url, data).status_code == 302
    return "admin:admin"


DOORS = {
    "service": revoke_with_service,
    "cli": revoke_from_the_command_line,
    "admin_delete": revoke_on_the_optin_delete_page,
    "admin_inline": revoke_in_the_project_inline,
}


@pytest.mark.parametrize("door", list(DOORS))
def test_revoking_an_optin_removes_the_source_projects_members_from_every_room(
    door, world, admin_client, monkeypatch
):
    monkeypatch.setattr("getpass.getuser", lambda: "ops-alice")
    heads = {slug: read(world.quinn, slug).json()["latest_seq"] for slug in ROOMS}

    actor = DOORS[door](world, admin_client)

    assert not CrossProjectOptIn.objects.filter(project=world.q, source=world.p).exists()
    for slug in ROOMS:
        # Pete is out: sends and reads are refused, nothing stored.
        assert_error(send(world.pete, slug), 403, "not_a_member")
        assert_error(read(world.pete, slug), 403, "not_a_member")
        pete = Member.objects.get(room__slug=slug, name__handle="pete")
        assert pete.left_at is not None
        # The room's stream says so, with the reason and not the operator.
        events = read(world.quinn, slug).json()["events"]
        assert [e["seq"] for e in events][-1] == heads[slug] + 1
        assert events[-1]["kind"] == "moderation"
        assert events[-1]["moderation"] == {
            "action": "remove",
            "reason": "opt-in revoked",
            "message_id": None,
            "member": "pete",
        }
        # Ralph's project still has its opt-in: he stays and talks.
        assert send(world.ralph, slug).status_code == 201
        assert Member.objects.get(room__slug=slug, name__handle="ralph").left_at is None
    removals = AuditRecord.objects.filter(action="room.remove").order_by("room_slug")
    assert [(r.room_slug, r.target, r.reason, r.actor) for r in removals] == [
        ("lab", "member pete", "opt-in revoked", actor),
        ("ops", "member pete", "opt-in revoked", actor),
    ]
    assert AuditRecord.objects.filter(action="optin.revoke").count() == 1


def test_a_member_removed_by_a_revocation_cannot_join_again(world):
    mailbox_services.optin_revoke(world.q, source=world.p, actor="test")

    response = client_for(world.pete).post("/api/v1/rooms/ops/join", {}, format="json")

    assert_error(response, 403, "cross_project_refused")
    assert Member.objects.get(room__slug="ops", name__handle="pete").left_at is not None


def test_a_thread_consented_to_keeps_working_after_the_revocation(world):
    started = client_for(world.pete).post(
        "/api/v1/notes/", {"body": "shall we pair?", "to": "quinn"}
    )
    assert started.status_code == 201, started.json()
    thread = started.json()["conversation_id"]
    answered = client_for(world.quinn).post(
        "/api/v1/notes/", {"body": "yes", "conversation_id": thread}
    )
    assert answered.status_code == 201, answered.json()

    mailbox_services.optin_revoke(world.q, source=world.p, actor="test")

    reply = client_for(world.pete).post("/api/v1/notes/", {"body": "ok", "conversation_id": thread})
    assert reply.status_code == 201, reply.json()
    # A new thread is refused.
    fresh = client_for(world.pete).post("/api/v1/notes/", {"body": "again?", "to": "quinn"})
    assert_error(fresh, 403, "cross_project_refused")


def test_a_project_that_accepts_every_project_keeps_the_members(world):
    Project.objects.filter(pk=world.q.pk).update(accept_all_projects=True)
    world.q.refresh_from_db()
    out = StringIO()

    call_command("plumb", "optin", "revoke", "q", "--from", "p", stdout=out)

    assert "accept_all_projects on" in out.getvalue()
    for slug in ROOMS:
        assert send(world.pete, slug).status_code == 201
    assert not Event.objects.filter(kind="moderation").exists()
    assert not AuditRecord.objects.filter(action="room.remove").exists()


def test_removals_roll_back_with_a_revocation_that_fails(world, monkeypatch):
    def fail(*args, **kwargs):
        raise RuntimeError("rooms could not react")

    # A receiver that raises undoes the whole revocation, opt-in row included.
    monkeypatch.setattr("rooms.receivers.members_remove_for_revoked_optin", fail)

    with pytest.raises(RuntimeError):
        mailbox_services.optin_revoke(world.q, source=world.p, actor="test")

    assert CrossProjectOptIn.objects.filter(project=world.q, source=world.p).exists()
    assert not AuditRecord.objects.filter(action="optin.revoke").exists()
    assert send(world.pete, "ops").status_code == 201


def test_turning_accept_all_projects_off_removes_agents_of_projects_without_an_optin(world):
    outsider = SessionFactory(
        workspace=WorkspaceFactory(project=ProjectFactory(slug="x"), slug="xw"), name="xena"
    )
    mailbox_services.project_update(world.q, actor="ops:script", accept_all_projects=True)
    assert client_for(outsider).post("/api/v1/rooms/ops/join", {}, format="json").status_code == 201

    mailbox_services.project_update(world.q, actor="ops:script", accept_all_projects=False)

    assert_error(send(outsider, "ops"), 403, "not_a_member")
    removal = Event.objects.filter(room__slug="ops", kind="moderation").last()
    assert removal.data == {"action": "remove", "reason": "opt-in revoked", "member": "xena"}
    # Projects it opted in to keep their agents.
    assert send(world.pete, "ops").status_code == 201
    assert send(world.ralph, "ops").status_code == 201
    assert Member.objects.filter(room__slug="ops", left_at__isnull=True).count() == 3
