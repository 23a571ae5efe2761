"""Project keys in the admin. A key is shown once, in the answer to the add POST, and
neither it nor its hash ever reaches another page, a cookie, the session store or the
admin log; keys are revoked, never deleted.
"""

import re

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.sessions.models import Session as HttpSession

from mailbox import credentials, services
from mailbox.models import ProjectKey
from tests.factories import ProjectFactory, ProjectKeyFactory
from tests.mailbox.admin_pages import bearer, html, url

pytestmark = pytest.mark.django_db


def test_new_key_is_shown_once_and_stored_only_as_a_hash(admin_client, workspace):
    response = admin_client.post(
        url("projectkey", "add"), {"project": str(workspace.project.pk), "label": "ci"}
    )
    assert response.status_code == 200
    assert "admin/mailbox/projectkey/key_created.html" in [t.name for t in response.templates]
    body = html(response)
    raw = response.context["raw_key"]
    assert raw.startswith("plumb_key_")
    assert body.count(raw) == 1
    assert "will not be shown again" in body
    assert "no-store" in response["Cache-Control"]

    key = ProjectKey.objects.get()
    assert (key.project, key.label, key.created_by) == (workspace.project, "ci", "admin:admin")
    assert credentials.matches(raw, key.key_hash)
    stored = [str(getattr(key, f.attname)) for f in ProjectKey._meta.concrete_fields]
    assert not any(raw in value for value in stored)
    assert key.key_hash in stored  # sanity: the comparison saw the hash column

    # Not in a cookie, the session store or the admin log.
    assert not any(raw in morsel.value for morsel in response.cookies.values())
    assert not any(raw in morsel.value for morsel in admin_client.cookies.values())
    for http_session in HttpSession.objects.all():
        assert raw not in http_session.session_data
        assert raw not in str(http_session.get_decoded())
    for entry in LogEntry.objects.all():
        assert raw not in f"{entry.object_repr} {entry.change_message}"

    # And the next page shows no trace of it.
    assert raw not in html(admin_client.get(url("projectkey", "changelist")))

    started = bearer(raw).post("/api/v1/sessions/", {"workspace": workspace.slug}, format="json")
    assert started.status_code == 201, started.json()
    assert started.json()["session"]["workspace"] == workspace.slug


def test_key_add_form_asks_only_for_project_and_label(admin_client):
    response = admin_client.get(url("projectkey", "add"))
    assert set(response.context["adminform"].form.fields) == {"project", "label"}


def test_key_change_form_edits_only_the_label(admin_client, project_key):
    response = admin_client.get(url("projectkey", "change", project_key.pk))
    assert set(response.context["adminform"].form.fields) == {"label"}
    response = admin_client.post(
        url("projectkey", "change", project_key.pk),
        {"label": "renamed", "project": str(ProjectFactory().pk)},
    )
    assert response.status_code == 302
    before = project_key
    project_key.refresh_from_db()
    assert project_key.label == "renamed"
    assert (project_key.project_id, project_key.key_hash) == (before.project_id, before.key_hash)


def test_keys_cannot_be_deleted(admin_client, project_key):
    response = admin_client.post(url("projectkey", "delete", project_key.pk), {"post": "yes"})
    assert response.status_code == 403
    changelist = admin_client.get(url("projectkey", "changelist"))
    assert "delete_selected" not in dict(changelist.context["action_form"].fields["action"].choices)
    assert ProjectKey.objects.filter(pk=project_key.pk).exists()


def test_revoke_action_revokes_and_the_key_stops_starting_sessions(admin_client, project_key):
    other = ProjectKeyFactory(project=project_key.project)
    response = admin_client.post(
        url("projectkey", "changelist"),
        {"action": "revoke_keys", "_selected_action": [str(project_key.pk)]},
    )
    assert response.status_code == 302
    project_key.refresh_from_db()
    other.refresh_from_db()
    assert project_key.revoked_at is not None
    assert other.revoked_at is None

    refused = bearer(project_key.raw_key).post(
        "/api/v1/sessions/", {"workspace": "main"}, format="json"
    )
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "key_revoked"


def test_key_list_says_active_or_revoked_in_words(admin_client, project):
    active = ProjectKeyFactory(project=project)
    revoked = ProjectKeyFactory(project=project)
    services.key_revoke(revoked, actor="test")
    revoked.refresh_from_db()

    page = html(admin_client.get(url("projectkey", "changelist")))

    cells = dict(
        re.findall(
            r'<a href="[^"]*/(\d+)/change/">.*?<td class="field-status">(.*?)</td>', page, re.S
        )
    )
    assert re.sub(r"<[^>]+>", " ", cells[str(active.pk)]).split() == ["active", "never", "used"]
    assert re.sub(r"<[^>]+>|\s+", " ", cells[str(revoked.pk)]).split() == [
        "revoked",
        f"{revoked.revoked_at:%Y-%m-%d}",
        f"{revoked.revoked_at:%H:%M}&nbsp;UTC",
    ]
    assert "icon-yes.svg" not in page
    assert "icon-no.svg" not in page


def test_key_status_filter(admin_client, project):
    active = ProjectKeyFactory(project=project)
    revoked = ProjectKeyFactory(project=project)
    services.key_revoke(revoked, actor="test")
    for value, expected in [("active", active), ("revoked", revoked)]:
        response = admin_client.get(url("projectkey", "changelist"), {"status": value})
        assert list(response.context["cl"].result_list) == [expected]
