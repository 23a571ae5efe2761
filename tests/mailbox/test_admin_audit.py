"""The audit trail in the admin: the records the identity admin writes under the
operator's name, and the trail's own pages, which only read.
"""

import pytest

from mailbox import services
from mailbox.models import AuditRecord, CrossProjectOptIn, ProjectKey
from tests.factories import ProjectFactory
from tests.mailbox.admin_pages import html, optin_inline_data, project_form_data, url

pytestmark = pytest.mark.django_db


# --- audit records from the identity admin ----------------------------------------------


def test_key_revoked_in_the_admin_is_audited_under_the_operator(admin_client, project_key):
    admin_client.post(
        url("projectkey", "changelist"),
        {"action": "revoke_keys", "_selected_action": [str(project_key.pk)]},
    )
    record = AuditRecord.objects.get(action="key.revoke")
    assert (record.actor, record.project, record.target) == (
        "admin:admin",
        project_key.project,
        f"{project_key.display_prefix} (0 session(s) ended)",
    )


def test_key_created_in_the_admin_is_audited(admin_client, project):
    admin_client.post(url("projectkey", "add"), {"project": str(project.pk), "label": "ci"})
    record = AuditRecord.objects.get(action="key.create")
    # key_create records its created_by (admin:<username>) as the actor.
    assert (record.actor, record.project_slug, record.reason) == ("admin:admin", project.slug, "ci")
    assert record.target == ProjectKey.objects.get().display_prefix


def test_optins_granted_and_revoked_in_the_admin_are_audited(admin_client):
    project, source = ProjectFactory(slug="acme"), ProjectFactory(slug="partner")
    admin_client.post(
        url("project", "change", project.pk),
        {
            **project_form_data(project),
            **optin_inline_data(new=[{"source": str(source.pk), "note": "joint work"}]),
        },
    )
    optin = CrossProjectOptIn.objects.get()
    admin_client.post(url("crossprojectoptin", "delete", optin.pk), {"post": "yes"})
    records = list(AuditRecord.objects.order_by("id").values_list("action", "actor", "reason"))
    assert records == [
        ("optin.grant", "admin:admin", "joint work"),
        ("optin.revoke", "admin:admin", ""),
    ]
    assert {r.target for r in AuditRecord.objects.all()} == {"acme accepts partner"}


# --- the audit trail ------------------------------------------------------------------


@pytest.fixture
def audit_trail(db):
    acme, other = ProjectFactory(slug="acme"), ProjectFactory(slug="other")
    services.audit_record(actor="admin:ann", action="room.hide", project=acme, room_slug="ops")
    services.audit_record(actor="cli:root", action="key.revoke", project=acme, target="k")
    services.audit_record(actor="admin:ann", action="room.lock", project=other, room_slug="dev")
    return AuditRecord.objects.all()


def test_audit_changelist_shows_who_what_where_and_why(admin_client, audit_trail):
    response = admin_client.get(url("auditrecord", "changelist"))
    assert response.status_code == 200
    assert response.context["cl"].list_display == (
        "when",
        "action_by",
        "target_where",
        "short_reason",
    )
    assert len(response.context["cl"].result_list) == 3
    body = html(response)
    assert "Audit trail" in body
    assert '<span class="plumb-badge plumb-badge-danger">room.hide</span>' in body
    assert "by admin:ann" in body
    assert "acme · #ops" in body


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"q": "acme"}, {"room.hide", "key.revoke"}),
        ({"q": "dev"}, {"room.lock"}),
        ({"action": "room.hide"}, {"room.hide"}),
        ({"from": "cli"}, {"key.revoke"}),
        ({"room_slug": "ops"}, {"room.hide"}),
    ],
)
def test_audit_changelist_search_and_filters(admin_client, audit_trail, params, expected):
    response = admin_client.get(url("auditrecord", "changelist"), params)
    assert {r.action for r in response.context["cl"].result_list} == expected


def test_audit_records_cannot_be_added_changed_or_deleted(admin_client, audit_trail):
    record = audit_trail.first()
    assert admin_client.get(url("auditrecord", "add")).status_code == 403
    assert admin_client.post(url("auditrecord", "change", record.pk), {}).status_code == 403
    response = admin_client.post(url("auditrecord", "delete", record.pk), {"post": "yes"})
    assert response.status_code == 403
    assert admin_client.get(url("auditrecord", "change", record.pk)).status_code == 200
    assert admin_client.get(url("auditrecord", "changelist")).context["action_form"] is None
    assert AuditRecord.objects.count() == 3
