import pytest

from mailbox.models import Session
from tests.factories import SessionFactory, WorkspaceFactory

pytestmark = pytest.mark.django_db


def test_session_start_returns_session_token_and_notes(key_client, workspace):
    response = key_client.post("/api/v1/sessions/", {"workspace": "main", "name": "bob"})
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["session"]["name"] == "bob"
    assert body["session"]["workspace"] == "main"
    assert body["session"]["project"] == workspace.project.slug
    assert body["token"].startswith("plumb_tok_")
    assert body["notes"] == []
    assert Session.objects.filter(public_id=body["session"]["id"]).exists()
