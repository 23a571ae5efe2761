"""Addresses, HTML and form data of the mailbox admin's pages, shared by
``tests/mailbox/test_admin_*.py``."""

from django.urls import reverse
from rest_framework.test import APIClient

from common.admin.actions import CONFIRM_FIELD
from mailbox.models import CrossProjectOptIn, Project
from mailbox.services.identity import POLICY_SETTINGS

MODELS = ["project", "crossprojectoptin", "projectkey", "workspace", "agentname", "session"]


def url(model: str, view: str, *args: object) -> str:
    return reverse(f"admin:mailbox_{model}_{view}", args=args)


def html(response) -> str:
    return response.content.decode()


def bearer(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def optin_inline_data(*, initial: list[CrossProjectOptIn] = (), new: list[dict] = ()) -> dict:
    """POST fields of the opt-in inline: existing rows (by id) and new rows."""
    data = {
        "optins-TOTAL_FORMS": str(len(initial) + len(new)),
        "optins-INITIAL_FORMS": str(len(initial)),
        "optins-MIN_NUM_FORMS": "0",
        "optins-MAX_NUM_FORMS": "1000",
    }
    for index, optin in enumerate(initial):
        data[f"optins-{index}-id"] = str(optin.pk)
        data[f"optins-{index}-project"] = str(optin.project_id)
    for offset, row in enumerate(new):
        index = len(initial) + offset
        data.update({f"optins-{index}-{field}": value for field, value in row.items()})
    return data


def _policy_value(project: Project | None, field: str) -> int:
    return getattr(project, field) if project else Project._meta.get_field(field).get_default()


def project_form_data(project: Project | None = None, **overrides: object) -> dict:
    data = {
        "name": project.name if project else "",
        "max_exchanges": str(project.max_exchanges if project else 20),
        "mailbox_enabled": "on",
        "note_ttl": str(project.note_ttl if project else 604800),
        **{
            field: str(
                getattr(project, field) if project else Project._meta.get_field(field).get_default()
            )
            for field in POLICY_SETTINGS
        },
    }
    data.update(overrides)
    return {key: value for key, value in data.items() if value is not None}


def conversation_action(client, action: str, conversation, reason: str | None):
    """The confirmation POST of a reason action (the first POST only shows the form)."""
    selected = [str(conversation.pk)]
    first = client.post(
        url("conversation", "changelist"),
        {"action": action, "_selected_action": selected, "index": "0"},
    )
    assert first.status_code == 200
    assert "admin/plumb/reason_confirmation.html" in [t.name for t in first.templates]
    data = {"action": action, "_selected_action": selected, CONFIRM_FIELD: "yes"}
    if reason is not None:
        data["reason"] = reason
    return client.post(url("conversation", "changelist"), data)
