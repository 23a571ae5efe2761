"""Who is calling is decided once per call (``mailbox.callers``), at every door.

The failed-credential count of the caller's address (``PLUMB_RATE_AUTH_FAIL``)
lives in the cache, shared over processes and hosts when Redis holds it, so
each read is a round trip: a call reads it once, whichever door it comes
through and whichever way its credential names the session. A credential
that matches nothing adds the one read that counts it.
"""

from __future__ import annotations

import json

import pytest
from django.test import Client
from rest_framework.test import APIClient

from mailbox.throttles import AuthFailureThrottle
from tests.conftest import assert_error
from tests.factories import SessionFactory
from tests.mcp.conftest import agent_headers

pytestmark = pytest.mark.django_db


class CountingCache:
    """The throttle's cache, counting what is read from it."""

    def __init__(self, cache):
        self.cache, self.reads = cache, 0

    def get(self, *args, **kwargs):
        self.reads += 1
        return self.cache.get(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.cache, name)


@pytest.fixture
def counted(monkeypatch) -> CountingCache:
    cache = CountingCache(AuthFailureThrottle.cache)
    monkeypatch.setattr(AuthFailureThrottle, "cache", cache)
    return cache


def mcp(method: str, headers: dict[str, str], params: dict | None = None):
    message = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
    return Client().post(
        "/mcp", data=json.dumps(message), content_type="application/json", headers=headers
    )


def tool(name: str, headers: dict[str, str], **extra):
    return mcp("tools/call", headers, {"name": name, "arguments": {}}, **extra)


def initialize(headers: dict[str, str]):
    params = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t"}}
    return mcp("initialize", headers, params)


def test_a_rest_session_call_reads_the_count_once(counted, agent_session):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {agent_session.raw_token}")

    assert client.get("/api/v1/sessions/current/").status_code == 200
    assert counted.reads == 1


def test_a_rest_session_start_reads_the_count_once(counted, key_client):
    response = key_client.post("/api/v1/sessions/", {"workspace": "main"}, format="json")

    assert response.status_code == 201
    assert counted.reads == 1


def test_an_mcp_call_with_a_session_token_reads_the_count_once(counted, agent_session):
    response = tool("list_rooms", {"Authorization": f"Bearer {agent_session.raw_token}"})

    assert response.json()["result"]["isError"] is False
    assert counted.reads == 1


def test_an_mcp_call_acting_as_an_open_name_reads_the_count_once(counted, project_key, workspace):
    SessionFactory(workspace=workspace, name="alice")

    response = tool("list_rooms", agent_headers(project_key.raw_key))

    assert response.json()["result"]["isError"] is False
    assert counted.reads == 1


def test_an_mcp_call_that_starts_its_name_reads_the_count_once(counted, project_key, workspace):
    response = tool("list_rooms", agent_headers(project_key.raw_key, name="newcomer"))

    assert response.json()["result"]["isError"] is False
    assert counted.reads == 1


def test_an_mcp_session_id_call_reads_the_count_once(counted, project_key, workspace):
    headers = agent_headers(project_key.raw_key, name=None)
    opened = initialize(headers)
    assert counted.reads == 1
    counted.reads = 0

    headers["Mcp-Session-Id"] = opened.headers["Mcp-Session-Id"]
    response = tool("list_rooms", headers)

    assert response.json()["result"]["isError"] is False
    assert counted.reads == 1


def test_a_credential_that_matches_nothing_adds_the_read_that_counts_it(counted, workspace):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer plumb_tok_abcdefgh_" + "x" * 43)

    assert_error(client.get("/api/v1/sessions/current/"), 401, "invalid_token")
    # One read to check the address, one under the lock that counts the failure.
    assert counted.reads == 2
