"""The ``moderators`` group: it reads and moderates conversations, notes and the audit
trail, and gets 403 on every identity page (SPEC §5).
"""

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse

from mailbox.models import AuditRecord, CrossProjectOptIn
from tests.factories import ProjectFactory
from tests.mailbox.admin_pages import (
    MODELS,
    conversation_action,
    html,
    optin_inline_data,
    project_form_data,
    url,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def moderator_client(client, django_user_model):
    """A staff user in the migration's ``moderators`` group, not a superuser."""
    user = django_user_model.objects.create_user("mod", password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name="moderators"))
    client.force_login(user)
    return client


def test_the_moderators_group_comes_from_the_migration():
    group = Group.objects.get(name="moderators")
    codenames = set(group.permissions.values_list("codename", flat=True))
    assert "view_auditrecord" in codenames
    assert "change_message" in codenames
    assert not codenames & {
        "view_project",
        "change_project",
        "view_crossprojectoptin",
        "add_crossprojectoptin",
        "view_projectkey",
        "add_projectkey",
    }


def test_the_index_shows_moderators_only_what_they_moderate(moderator_client):
    response = moderator_client.get(reverse("admin:index"))
    assert response.status_code == 200
    listed = {
        model["object_name"] for app in response.context["app_list"] for model in app["models"]
    }
    assert listed == {"Room", "Member", "Message", "Event", "Conversation", "Note", "AuditRecord"}
    body = html(response)
    for hidden in MODELS:
        assert url(hidden, "changelist") not in body
    assert "moderator" in body  # the role label beside the site name


@pytest.mark.parametrize("model", MODELS)
def test_moderators_get_403_on_identity_pages(moderator_client, populated, model):
    assert moderator_client.get(url(model, "changelist")).status_code == 403
    assert moderator_client.get(url(model, "change", populated[model].pk)).status_code == 403
    if model != "session":
        assert moderator_client.get(url(model, "add")).status_code == 403


def test_moderators_cannot_grant_optins_or_change_collab_settings(moderator_client, populated):
    project, other = populated["project"], ProjectFactory(slug="third")
    response = moderator_client.post(
        url("crossprojectoptin", "add"),
        {"project": str(project.pk), "source": str(other.pk), "note": "sneaky"},
    )
    assert response.status_code == 403
    response = moderator_client.post(
        url("project", "change", project.pk),
        {**project_form_data(project, accept_all_projects="on"), **optin_inline_data()},
    )
    assert response.status_code == 403
    project.refresh_from_db()
    assert not project.accept_all_projects
    assert not CrossProjectOptIn.objects.filter(source=other).exists()
    autocomplete = moderator_client.get(
        reverse("admin:autocomplete"),
        {"app_label": "mailbox", "model_name": "crossprojectoptin", "field_name": "project"},
    )
    assert autocomplete.status_code == 403


def test_moderators_read_conversations_notes_and_the_audit_trail(moderator_client, conversation):
    assert moderator_client.get(url("conversation", "changelist")).status_code == 200
    assert moderator_client.get(url("conversation", "change", conversation.pk)).status_code == 200
    transcript = reverse("admin:mailbox_conversation_transcript", args=[conversation.pk])
    assert moderator_client.get(transcript).status_code == 200
    assert moderator_client.get(url("note", "changelist")).status_code == 200
    assert moderator_client.get(url("auditrecord", "changelist")).status_code == 200
    response = conversation_action(moderator_client, "lock_conversations", conversation, "spam")
    assert response.status_code == 302
    assert AuditRecord.objects.get(action="conversation.lock").actor == "admin:mod"
