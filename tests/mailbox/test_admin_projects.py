"""Projects and cross-project opt-ins in the admin: every write goes through a service,
is audited under the operator, and a refusal becomes a form error (SPEC §5).
"""

import json

import pytest

from mailbox import services
from mailbox.errors import AlreadyExists
from mailbox.models import AuditRecord, CrossProjectOptIn, Project, Workspace
from tests.factories import OptInFactory, ProjectFactory
from tests.mailbox.admin_pages import html, optin_inline_data, project_form_data, url

pytestmark = pytest.mark.django_db


# --- projects -------------------------------------------------------------------------


def test_project_added_in_the_admin_gets_service_defaults(admin_client):
    response = admin_client.post(
        url("project", "add"),
        {**project_form_data(slug="acme", max_exchanges="5"), **optin_inline_data()},
    )
    assert response.status_code == 302, response.context["adminform"].errors
    project = Project.objects.get(slug="acme")
    assert project.name == "acme"  # project_create names an unnamed project after its slug
    assert project.max_exchanges == 5
    assert project.mailbox_enabled is True


def test_project_with_a_bad_slug_is_refused_with_a_form_error(admin_client):
    response = admin_client.post(
        url("project", "add"), {**project_form_data(slug="Bad Slug"), **optin_inline_data()}
    )
    assert response.status_code == 200
    assert "slug" in response.context["adminform"].form.errors
    assert not Project.objects.filter(slug="Bad Slug").exists()


def test_collab_settings_are_edited_and_the_slug_is_not(admin_client):
    project = ProjectFactory(slug="acme", name="Acme")
    response = admin_client.post(
        url("project", "change", project.pk),
        {
            **project_form_data(project, slug="renamed", max_exchanges="3", mailbox_enabled=None),
            "accept_all_projects": "on",
            **optin_inline_data(),
        },
    )
    assert response.status_code == 302
    project.refresh_from_db()
    assert (project.slug, project.max_exchanges) == ("acme", 3)
    assert project.mailbox_enabled is False
    assert project.accept_all_projects is True


def test_accepting_all_projects_in_the_admin_is_audited_naming_the_admin(admin_client, admin_user):
    """SPEC §5: accept_all_projects is an opt-in to every project, audited like one."""
    project = ProjectFactory(slug="acme")
    data = {**project_form_data(project), "accept_all_projects": "on", **optin_inline_data()}

    response = admin_client.post(url("project", "change", project.pk), data)

    assert response.status_code == 302
    project.refresh_from_db()
    assert project.accept_all_projects is True
    records = list(AuditRecord.objects.values_list("actor", "action", "project_slug", "target"))
    actor = f"admin:{admin_user.get_username()}"
    assert records == [(actor, "project.accept_all_projects", "acme", "off → on")]

    # Saving the same value again changes nothing and records nothing.
    again = admin_client.post(url("project", "change", project.pk), data)

    assert again.status_code == 302
    assert AuditRecord.objects.count() == 1


def test_every_collab_setting_changed_in_the_admin_leaves_its_own_record(admin_client):
    project = ProjectFactory(slug="acme", name="Acme")
    data = {
        **project_form_data(project, max_exchanges="3", mailbox_enabled=None),
        **optin_inline_data(),
    }

    response = admin_client.post(url("project", "change", project.pk), data)

    assert response.status_code == 302
    project.refresh_from_db()
    assert (project.mailbox_enabled, project.max_exchanges) == (False, 3)
    records = set(AuditRecord.objects.values_list("actor", "action", "target"))
    assert records == {
        ("admin:admin", "project.mailbox", "on → off"),
        ("admin:admin", "project.max_exchanges", "20 → 3"),
    }


def test_max_exchanges_below_one_is_refused(admin_client):
    project = ProjectFactory(slug="acme")
    response = admin_client.post(
        url("project", "change", project.pk),
        {**project_form_data(project, max_exchanges="0"), **optin_inline_data()},
    )
    assert response.status_code == 200
    assert "max_exchanges" in response.context["adminform"].form.errors
    project.refresh_from_db()
    assert project.max_exchanges == 20


def test_project_changelist_has_collab_columns_and_filters(admin_client):
    ProjectFactory(slug="acme", accept_all_projects=True)
    ProjectFactory(slug="quiet", mailbox_enabled=False)
    response = admin_client.get(url("project", "changelist"), {"mailbox_enabled__exact": "0"})
    assert [p.slug for p in response.context["cl"].result_list] == ["quiet"]
    response = admin_client.get(url("project", "changelist"), {"q": "acm"})
    assert [p.slug for p in response.context["cl"].result_list] == ["acme"]
    page = html(response)
    assert '<span class="plumb-badge plumb-badge-ok">on</span>' in page
    assert '<span class="plumb-badge plumb-badge-warn">all projects</span>' in page
    assert "icon-no.svg" not in page


# --- opt-ins --------------------------------------------------------------------------


def test_the_optin_inline_button_says_add_an_optin(admin_client):
    project = ProjectFactory(slug="acme")
    OptInFactory(project=project, source=ProjectFactory(slug="partner"))

    response = admin_client.get(url("project", "change", project.pk))

    (optins,) = response.context["inline_admin_formsets"]
    assert json.loads(optins.inline_formset_data())["options"]["addText"] == "Add an opt-in"
    page = html(response)
    assert "Add an opt-in" in page
    assert "ccepts traffic from" not in page


def test_inline_optin_added_on_a_project_records_the_operator(admin_client, admin_user):
    project = ProjectFactory(slug="acme")
    source = ProjectFactory(slug="partner")
    response = admin_client.post(
        url("project", "change", project.pk),
        {
            **project_form_data(project),
            **optin_inline_data(new=[{"source": str(source.pk), "note": "joint work"}]),
        },
    )
    assert response.status_code == 302
    optin = CrossProjectOptIn.objects.get(project=project, source=source)
    assert optin.created_by == f"admin:{admin_user.get_username()}" == "admin:admin"
    assert optin.note == "joint work"


def test_inline_optin_on_a_new_project(admin_client):
    source = ProjectFactory(slug="partner")
    response = admin_client.post(
        url("project", "add"),
        {
            **project_form_data(slug="acme"),
            **optin_inline_data(new=[{"source": str(source.pk), "note": ""}]),
        },
    )
    assert response.status_code == 302
    optin = CrossProjectOptIn.objects.get(project__slug="acme")
    assert (optin.source, optin.created_by) == (source, "admin:admin")


def test_inline_optin_deleted_on_a_project_is_revoked(admin_client):
    optin = OptInFactory(project=ProjectFactory(slug="acme"), source=ProjectFactory(slug="p"))
    data = {**project_form_data(optin.project), **optin_inline_data(initial=[optin])}
    data["optins-0-DELETE"] = "on"
    response = admin_client.post(url("project", "change", optin.project.pk), data)
    assert response.status_code == 302
    assert not CrossProjectOptIn.objects.filter(pk=optin.pk).exists()


def test_existing_inline_optins_cannot_be_edited(admin_client):
    optin = OptInFactory(project=ProjectFactory(slug="acme"), source=ProjectFactory(slug="p"))
    intruder = ProjectFactory(slug="intruder")
    data = {**project_form_data(optin.project), **optin_inline_data(initial=[optin])}
    data.update({"optins-0-source": str(intruder.pk), "optins-0-note": "sneaky"})
    response = admin_client.post(url("project", "change", optin.project.pk), data)
    assert response.status_code == 302
    optin.refresh_from_db()
    assert (optin.source.slug, optin.note) == ("p", "")


def test_inline_optin_to_itself_is_refused(admin_client):
    project = ProjectFactory(slug="acme")
    response = admin_client.post(
        url("project", "change", project.pk),
        {
            **project_form_data(project),
            **optin_inline_data(new=[{"source": str(project.pk), "note": ""}]),
        },
    )
    assert response.status_code == 200
    assert not CrossProjectOptIn.objects.exists()


def test_optin_added_in_its_changelist_records_the_operator(admin_client):
    project, source = ProjectFactory(slug="acme"), ProjectFactory(slug="partner")
    response = admin_client.post(
        url("crossprojectoptin", "add"),
        {"project": str(project.pk), "source": str(source.pk), "note": "ticket 42"},
    )
    assert response.status_code == 302
    optin = CrossProjectOptIn.objects.get(project=project, source=source)
    assert (optin.created_by, optin.note) == ("admin:admin", "ticket 42")


def test_duplicate_optin_is_refused_with_a_form_error(admin_client):
    optin = OptInFactory(project=ProjectFactory(slug="acme"), source=ProjectFactory(slug="p"))
    response = admin_client.post(
        url("crossprojectoptin", "add"),
        {"project": str(optin.project_id), "source": str(optin.source_id), "note": ""},
    )
    assert response.status_code == 200
    assert response.context["adminform"].form.errors
    assert CrossProjectOptIn.objects.count() == 1


def test_optin_deleted_from_its_change_page_is_revoked(admin_client):
    optin = OptInFactory(project=ProjectFactory(slug="acme"), source=ProjectFactory(slug="p"))
    response = admin_client.post(url("crossprojectoptin", "delete", optin.pk), {"post": "yes"})
    assert response.status_code == 302
    assert not CrossProjectOptIn.objects.exists()


def test_optins_deleted_by_the_bulk_action_are_revoked(admin_client):
    project = ProjectFactory(slug="acme")
    optins = [OptInFactory(project=project, source=ProjectFactory()) for _ in range(3)]
    response = admin_client.post(
        url("crossprojectoptin", "changelist"),
        {
            "action": "delete_selected",
            "_selected_action": [str(o.pk) for o in optins[:2]],
            "post": "yes",
        },
    )
    assert response.status_code == 302
    assert list(CrossProjectOptIn.objects.all()) == [optins[2]]


def test_optin_change_page_is_view_only(admin_client):
    optin = OptInFactory(project=ProjectFactory(slug="acme"), source=ProjectFactory(slug="p"))
    intruder = ProjectFactory(slug="intruder")
    response = admin_client.post(
        url("crossprojectoptin", "change", optin.pk),
        {"project": str(optin.project_id), "source": str(intruder.pk), "note": "x"},
    )
    assert response.status_code == 403
    optin.refresh_from_db()
    assert optin.source.slug == "p"


def test_a_service_refusal_after_form_validation_becomes_an_error_message(
    admin_client, monkeypatch
):
    """Simulates a concurrent create slipping between the form's check and the insert."""
    project = ProjectFactory(slug="acme")

    def refuse(*args, **kwargs):
        raise AlreadyExists("Workspace acme/main already exists.")

    monkeypatch.setattr(services, "workspace_create", refuse)
    response = admin_client.post(
        url("workspace", "add"), {"project": str(project.pk), "slug": "main"}, follow=True
    )
    assert response.status_code == 200
    assert "already exists" in html(response)
    assert not Workspace.objects.exists()
