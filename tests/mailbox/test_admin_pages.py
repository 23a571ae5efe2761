"""The mailbox admin's pages: every page renders, and no stored hash ever reaches one."""

import re

import pytest
from django.urls import reverse

from mailbox.models import Session
from tests.mailbox.admin_pages import MODELS, html, url

pytestmark = pytest.mark.django_db


# --- every page renders ---------------------------------------------------------------


@pytest.mark.parametrize("model", MODELS)
def test_every_changelist_renders(admin_client, populated, model):
    response = admin_client.get(url(model, "changelist"))
    assert response.status_code == 200
    assert response.context["cl"].result_count >= 1


@pytest.mark.parametrize("model", MODELS)
def test_every_change_page_renders(admin_client, populated, model):
    response = admin_client.get(url(model, "change", populated[model].pk))
    assert response.status_code == 200


@pytest.mark.parametrize(
    ("model", "title"),
    [
        ("project", "Projects"),
        ("crossprojectoptin", "Cross-project opt-ins"),
        ("projectkey", "Project keys"),
        ("workspace", "Workspaces"),
        ("agentname", "Agent names"),
        ("session", "Sessions"),
    ],
)
def test_changelists_are_titled_with_what_they_list(admin_client, populated, model, title):
    """Not "Select session to change": sessions, for one, cannot be changed."""
    page = html(admin_client.get(url(model, "changelist")))

    assert re.search(r"<h1>(.*?)</h1>", page).group(1) == title
    assert re.search(r"<title>(.*?) \|", page).group(1) == title
    assert "to change" not in page


@pytest.mark.parametrize("model", ["project", "crossprojectoptin", "projectkey", "workspace"])
def test_add_pages_render(admin_client, populated, model):
    assert admin_client.get(url(model, "add")).status_code == 200


def test_agent_name_add_page_renders_for_reserving_a_name(admin_client, populated):
    assert admin_client.get(url("agentname", "add")).status_code == 200


def test_sessions_cannot_be_added_or_deleted_from_the_admin(admin_client, populated):
    session = populated["session"]
    assert admin_client.get(url("session", "add")).status_code == 403
    assert admin_client.post(url("session", "delete", session.pk), {"post": "yes"}).status_code == (
        403
    )
    assert Session.objects.filter(pk=session.pk).exists()


def test_site_is_titled_plumb(admin_client):
    response = admin_client.get(reverse("admin:index"))
    assert response.status_code == 200
    assert "plumb" in html(response)
    assert "Operations" in html(response)


# --- secrets never shown --------------------------------------------------------------


def test_hashes_never_appear_in_admin_html(admin_client, populated):
    key, session = populated["projectkey"], populated["session"]
    secrets = [key.key_hash, session.token_hash, "key_hash", "token_hash"]
    pages = [url(model, "changelist") for model in MODELS]
    pages += [url(model, "change", populated[model].pk) for model in MODELS]
    pages += [url(model, "add") for model in MODELS if model != "session"]
    for page in pages:
        body = html(admin_client.get(page))
        for secret in secrets:
            assert secret not in body, (page, secret)
