"""A project's ``note_ttl`` (SPEC §8): seconds a note of its agents may wait
before it bounces. Set in the admin and with ``plumb project create|set
--note-ttl``, through one service, audited, at least 1 second.
"""

from __future__ import annotations

import pytest

from mailbox import services
from mailbox.models import AuditRecord, Project
from tests.cli import plumb, plumb_fails
from tests.factories import ProjectFactory
from tests.mailbox.admin_pages import optin_inline_data, project_form_data, url

pytestmark = pytest.mark.django_db


def test_a_new_project_lets_notes_wait_a_week():
    project = services.project_create("acme")

    assert project.note_ttl == 7 * 24 * 3600


def test_plumb_project_set_changes_the_note_ttl_and_records_it():
    ProjectFactory(slug="acme")

    out, err = plumb("project", "set", "acme", "--note-ttl", "2")

    assert Project.objects.get(slug="acme").note_ttl == 2
    assert "note_ttl 2" in out
    assert err == ""
    record = AuditRecord.objects.get(action="project.note_ttl")
    assert (record.project_slug, record.target) == ("acme", "604800 → 2")


def test_plumb_project_create_takes_a_note_ttl():
    plumb("project", "create", "acme", "--note-ttl", "3600")

    assert Project.objects.get(slug="acme").note_ttl == 3600


@pytest.mark.parametrize("value", ["0", "-5", "315360001"])
def test_a_note_ttl_out_of_range_is_refused_and_nothing_changes(value):
    ProjectFactory(slug="acme")

    error = plumb_fails("project", "set", "acme", "--note-ttl", value)

    assert "note_ttl" in str(error)
    assert Project.objects.get(slug="acme").note_ttl == 604800
    assert not AuditRecord.objects.filter(action="project.note_ttl").exists()


def test_the_admin_changes_the_note_ttl_and_records_who_did(admin_client):
    project = ProjectFactory(slug="acme")

    response = admin_client.post(
        url("project", "change", project.pk),
        {**project_form_data(project, note_ttl="60"), **optin_inline_data()},
    )

    assert response.status_code == 302, response.context["adminform"].form.errors
    assert Project.objects.get(pk=project.pk).note_ttl == 60
    record = AuditRecord.objects.get(action="project.note_ttl")
    assert (record.actor, record.target) == ("admin:admin", "604800 → 60")


def test_the_admin_refuses_a_note_ttl_below_one_second(admin_client):
    project = ProjectFactory(slug="acme")

    response = admin_client.post(
        url("project", "change", project.pk),
        {**project_form_data(project, note_ttl="0"), **optin_inline_data()},
    )

    assert response.status_code == 200
    assert "note_ttl" in response.context["adminform"].form.errors
    assert Project.objects.get(pk=project.pk).note_ttl == 604800
