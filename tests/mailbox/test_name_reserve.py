"""Reserving a name ahead of its first session (SPEC §5, ``plumb connect``).

An operator who configures agent ``bob`` binds the name to bob's workspace at
once, so a note to bob waits for it (``"delivery": "name"``) instead of
``recipient_not_found`` until bob first connects.
"""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from common.errors import PlumbError
from mailbox import services
from mailbox.models import AgentName, AuditRecord, Session
from tests.conftest import client_for
from tests.factories import AgentNameFactory, ProjectKeyFactory, WorkspaceFactory

pytestmark = pytest.mark.django_db

OPERATOR = "cli:ops-alice"


def reservations() -> list[tuple[str, str, str, str]]:
    return list(
        AuditRecord.objects.filter(action="name.reserve")
        .order_by("id")
        .values_list("actor", "project_slug", "target", "reason")
    )


def test_reserve_binds_a_new_name_to_the_workspace_for_good_and_records_it(workspace):
    name, reserved = services.name_reserve(workspace, "bob", actor=OPERATOR)

    assert reserved is True
    stored = AgentName.objects.get(handle="bob")
    assert stored.pk == name.pk
    assert stored.workspace == workspace
    assert stored.disposable is False  # names_free never takes it
    assert not Session.objects.filter(name=stored).exists()
    assert reservations() == [
        (OPERATOR, workspace.project.slug, "name bob in workspace main", ""),
    ]


def test_reserving_a_name_bound_here_again_changes_and_records_nothing(workspace):
    services.name_reserve(workspace, "bob", actor=OPERATOR)

    name, reserved = services.name_reserve(workspace, "bob", actor=OPERATOR)

    assert reserved is False
    assert name.workspace == workspace
    assert AgentName.objects.filter(handle="bob").count() == 1
    assert len(reservations()) == 1


def test_reserving_a_generated_name_of_this_workspace_keeps_it_for_good(workspace):
    AgentName.objects.create(handle="swift-otter-42", workspace=workspace, disposable=True)

    _, reserved = services.name_reserve(workspace, "swift-otter-42", actor=OPERATOR)

    assert reserved is True
    assert AgentName.objects.get(handle="swift-otter-42").disposable is False
    assert reservations() == [
        (OPERATOR, workspace.project.slug, "name swift-otter-42 in workspace main", ""),
    ]


def test_a_name_bound_to_another_workspace_is_refused_as_name_taken(workspace):
    other = WorkspaceFactory(slug="other")
    AgentNameFactory(handle="bob", workspace=other)

    with pytest.raises(PlumbError) as refused:
        services.name_reserve(workspace, "bob", actor=OPERATOR)

    assert refused.value.code == "name_taken"
    assert f"workspace 'other' of project {other.project.slug!r}" in refused.value.message
    assert AgentName.objects.get(handle="bob").workspace == other
    assert reservations() == []


@pytest.mark.parametrize("handle", ["next", "Bob", "bob!", "", "-bob", "b" * 65])
def test_a_reserved_or_malformed_name_is_refused_and_nothing_is_stored(workspace, handle):
    with pytest.raises(PlumbError) as refused:
        services.name_reserve(workspace, handle, actor=OPERATOR)

    assert refused.value.code == "validation_error"
    assert "name" in refused.value.details
    assert not AgentName.objects.exists()
    assert reservations() == []


def test_a_note_to_a_reserved_name_waits_for_its_first_session(workspace, alice):
    services.name_reserve(workspace, "bob", actor=OPERATOR)

    left = client_for(alice).post("/api/v1/notes/", {"to": "bob", "body": "hi bob"}, format="json")

    assert left.status_code == 201, left.json()
    assert left.json()["delivery"] == "name"
    key = ProjectKeyFactory(project=workspace.project)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key.raw_key}")
    started = client.post("/api/v1/sessions/", {"workspace": "main", "name": "bob"}, format="json")
    assert started.status_code == 201, started.json()
    assert [note["body"] for note in started.json()["notes"]] == ["hi bob"]
