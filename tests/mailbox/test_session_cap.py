"""A cap on a project's connected sessions (SPEC §8 ``max_connected_sessions``)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from mailbox import services
from mailbox.models import Session
from tests.conftest import assert_error
from tests.factories import SessionFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("_no_rate_limits")]

START = "/api/v1/sessions/"


@pytest.fixture
def _no_rate_limits(settings):
    settings.PLUMB_RATE_SESSION = None
    settings.PLUMB_RATE_KEY = None


def cap(project, n: int) -> None:
    services.project_update(project, actor="test", max_connected_sessions=n)


def start(key_client, name: str):
    return key_client.post(START, {"workspace": "main", "name": name}, format="json")


def mcp_as(project_key, name: str) -> dict:
    """A tool call that starts the session of ``name`` implicitly (SPEC §6)."""
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "check_messages", "arguments": {}},
    }
    response = Client().post(
        "/mcp",
        data=json.dumps(message),
        content_type="application/json",
        headers={
            "Authorization": f"Bearer {project_key.raw_key}",
            "Plumb-Workspace": "main",
            "Plumb-Name": name,
        },
    )
    return response.json()


def test_a_start_past_the_cap_is_refused_at_both_doors(key_client, project, project_key):
    cap(project, 2)
    assert start(key_client, "one").status_code == 201
    assert start(key_client, "two").status_code == 201

    error = assert_error(start(key_client, "three"), 429, "too_many_sessions")
    answer = mcp_as(project_key, "four")

    assert error["details"] == {"max_connected_sessions": 2, "connected": 2}
    result = answer["result"]
    assert result["isError"] is True
    assert result["structuredContent"]["error"] == error | {
        "message": result["structuredContent"]["error"]["message"]
    }
    assert Session.objects.filter(ended_at__isnull=True).count() == 2


def test_ended_and_expired_sessions_leave_room_for_new_ones(key_client, project, settings):
    cap(project, 1)
    response = start(key_client, "one")
    token = response.json()["token"]
    assert_error(start(key_client, "two"), 429, "too_many_sessions")

    Client().delete(START + "current/", headers={"Authorization": f"Bearer {token}"})
    assert start(key_client, "two").status_code == 201

    Session.objects.update(
        last_seen_at=timezone.now() - timedelta(seconds=settings.PLUMB_SESSION_TTL + 1)
    )
    assert start(key_client, "three").status_code == 201


def test_other_projects_sessions_do_not_count(key_client, project):
    cap(project, 1)
    SessionFactory(name="elsewhere")  # a workspace of another project
    assert start(key_client, "one").status_code == 201


def test_without_a_cap_a_start_runs_no_statement_for_it(key_client, project):
    start(key_client, "warm")
    with CaptureQueriesContext(connection) as uncapped:
        assert start(key_client, "one").status_code == 201
    cap(project, 100)
    with CaptureQueriesContext(connection) as capped:
        assert start(key_client, "two").status_code == 201
    assert len(capped) == len(uncapped) + 2  # the project row, locked; the count
