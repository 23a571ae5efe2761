"""A token that existed is no guess (SPEC §2), under gunicorn as ``make serve`` runs it.

Once a generated name is freed its sessions' rows are gone; its old token
answers ``401 session_ended`` every time, and however often it is retried it
never locks out the other agents on the same address (all of them share
127.0.0.1 under ``make serve``), as credentials that never existed would.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from mailbox.models import AgentName
from mailbox.services import names_free
from tests.factories import ProjectKeyFactory, SessionFactory, WorkspaceFactory
from tests.scale.harness import Api, call

pytestmark = pytest.mark.django_db(transaction=True)

RETRIES = 25  # past PLUMB_RATE_AUTH_FAIL's default of 20 a minute


def test_retrying_a_freed_token_never_locks_out_the_address(server):
    api = Api(server)
    workspace = WorkspaceFactory(slug="main")
    key = ProjectKeyFactory(project=workspace.project).raw_key
    alice = SessionFactory(workspace=workspace, name="alice")
    status, started = api.start_session(key, "main")  # a generated name
    assert status == 201, started
    stale = started["token"]
    assert call("DELETE", f"{api.base}/sessions/current/", token=stale)[0] == 200
    later = timezone.now() + timedelta(seconds=max(settings.PLUMB_SESSION_TTL, 60) + 1)
    assert names_free(now=later) == 1
    assert not AgentName.objects.filter(handle=started["session"]["name"]).exists()

    answers = [call("GET", f"{api.base}/sessions/current/", token=stale) for _ in range(RETRIES)]

    assert [(s, b["error"]["code"]) for s, b in answers] == [(401, "session_ended")] * RETRIES
    assert call("GET", f"{api.base}/sessions/current/", token=alice.raw_token)[0] == 200
    assert api.start_session(key, "main", "bob")[0] == 201
