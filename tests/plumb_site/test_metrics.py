"""GET /metrics (SPEC §7): what REST and MCP calls count, and who may read it.

The counters live in the test process (no PROMETHEUS_MULTIPROC_DIR here), so
they carry what earlier tests counted: each test scrapes before and after and
checks the difference. ``tests/scale/test_metrics.py`` checks the sum over
gunicorn's processes.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from django.db import connections
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import assert_error, client_for
from tests.factories import SessionFactory

pytestmark = pytest.mark.django_db

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(**headers: str) -> Samples:
    response = Client().get("/metrics", headers=headers)
    assert response.status_code == 200, response.content[:300]
    assert response["Content-Type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def requests(before: Samples, after: Samples, operation: str, method: str, status: int) -> float:
    labels = {"operation": operation, "method": method, "status": str(status)}
    counted = moved(before, after, "plumb_requests_total", **labels)
    timed = moved(before, after, "plumb_request_duration_seconds_count", **labels)
    assert counted == timed, (operation, counted, timed)
    return counted


def mcp_call(token: str, tool: str, arguments: dict):
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    return Client().post(
        "/mcp",
        data=json.dumps(message),
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )


def test_rest_and_mcp_calls_move_the_counters_by_exactly_what_they_did(
    alice, bob, carol, django_capture_on_commit_callbacks
):
    as_alice, as_bob = client_for(alice), client_for(bob)
    before = scrape()

    with django_capture_on_commit_callbacks(execute=True):
        assert as_alice.post("/api/v1/notes/", {"to": "bob", "body": "hi"}).status_code == 201
        assert as_alice.post("/api/v1/notes/", {"to": "carol", "body": "later"}).status_code == 201
        checked = as_bob.get("/api/v1/notes/")
        assert [note["body"] for note in checked.json()["notes"]] == ["hi"]
        assert as_alice.post("/api/v1/rooms/", {"slug": "ops"}).status_code == 201
        send = {"body": "deploying", "idempotency_key": "d1"}
        assert as_alice.post("/api/v1/rooms/ops/messages/", send).status_code == 201
        assert as_alice.post("/api/v1/rooms/ops/messages/", send).json()["replayed"] is True
        sent = mcp_call(alice.raw_token, "send_message", {"room": "ops", "body": "via MCP"})
        assert sent.json()["result"]["isError"] is False
        missing = mcp_call(alice.raw_token, "send_message", {"room": "nope", "body": "lost"})
        assert missing.status_code == 200
        assert missing.json()["result"]["isError"] is True
        assert Client().get("/api/v1/no-such-thing/").status_code == 404

    after = scrape()
    assert requests(before, after, "notes", "POST", 201) == 2
    assert requests(before, after, "notes", "GET", 200) == 1
    assert requests(before, after, "rooms", "POST", 201) == 1
    assert requests(before, after, "room-messages", "POST", 201) == 1
    assert requests(before, after, "room-messages", "POST", 200) == 1  # the replay
    # One URL for every tool: the tool names the operation, the REST status the outcome.
    assert requests(before, after, "mcp:send_message", "POST", 200) == 1
    assert requests(before, after, "mcp:send_message", "POST", 404) == 1
    assert requests(before, after, "unmatched", "GET", 404) == 1
    assert moved(before, after, "plumb_notes_sent_total") == 2
    assert moved(before, after, "plumb_notes_delivered_total") == 1
    # Replays store nothing and count nothing; the MCP send counts like a REST one.
    assert moved(before, after, "plumb_room_messages_sent_total") == 2
    # Computed at scrape time from the database: carol's note waits.
    assert value(after, "plumb_notes_pending") == 1
    assert value(after, "plumb_polls_waiting") == 0
    # The scrape before this one was counted too, under its own name.
    assert requests(before, after, "metrics", "GET", 200) == 1


def test_calls_refused_by_a_rate_limit_are_counted_by_limit(settings, alice):
    settings.PLUMB_RATE_SESSION = "2/m"
    as_alice = client_for(alice)
    before = scrape()

    statuses = [as_alice.get("/api/v1/sessions/current/").status_code for _ in range(3)]
    refused = mcp_call(alice.raw_token, "list_rooms", {})

    after = scrape()
    assert statuses == [200, 200, 429]
    assert refused.status_code == 429
    assert moved(before, after, "plumb_throttled_total", limit="session") == 2
    assert requests(before, after, "session-current", "GET", 429) == 1
    assert requests(before, after, "mcp:list_rooms", "POST", 429) == 1


def test_the_pending_gauge_is_one_query(alice, django_assert_num_queries):
    with django_assert_num_queries(1):
        Client().get("/metrics")


@pytest.mark.django_db(transaction=True)
def test_a_waiting_long_poll_shows_in_the_gauge_until_its_note_arrives(workspace):
    alice = SessionFactory(workspace=workspace, name="alice")
    bob = SessionFactory(workspace=workspace, name="bob")
    answers: list = []

    def poll() -> None:
        try:
            answers.append(client_for(bob).get("/api/v1/notes/?wait=10"))
        finally:
            connections.close_all()  # this thread's

    poller = threading.Thread(target=poll)
    poller.start()
    deadline = time.monotonic() + 10
    while value(scrape(), "plumb_polls_waiting") != 1:
        assert time.monotonic() < deadline, "the poller never showed as waiting"
        time.sleep(0.05)

    woken = client_for(alice).post("/api/v1/notes/", {"to": "bob", "body": "wake"})
    assert woken.status_code == 201
    poller.join(10)

    assert [note["body"] for note in answers[0].json()["notes"]] == ["wake"]
    assert value(scrape(), "plumb_polls_waiting") == 0


# --- who may read it ---------------------------------------------------------------------

TOKEN = "metrics-token-0123456789"


def test_metrics_are_open_when_no_token_is_set(settings):
    settings.PLUMB_METRICS_TOKEN = None

    response = Client().get("/metrics")

    assert response.status_code == 200
    assert b"plumb_requests_total" in response.content


@pytest.mark.parametrize(
    ("authorization", "code"),
    [
        (None, "not_authenticated"),
        ("Basic bWV0cmljczp4", "not_authenticated"),
        ("Bearer ", "not_authenticated"),
        ("Bearer metrics-token-0123456788", "invalid_token"),
        (f"Bearer {TOKEN}x", "invalid_token"),
    ],
)
def test_a_set_token_is_required_as_the_bearer(settings, authorization, code):
    settings.PLUMB_METRICS_TOKEN = TOKEN
    headers = {"Authorization": authorization} if authorization else {}

    response = Client().get("/metrics", headers=headers)

    assert_error(response, 401, code)
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert b"plumb_requests_total" not in response.content


def test_the_set_token_opens_the_metrics(settings):
    settings.PLUMB_METRICS_TOKEN = TOKEN

    samples = scrape(Authorization=f"Bearer {TOKEN}")

    assert ("plumb_notes_pending", ()) in samples


def test_metrics_answer_get_only_in_the_error_shape():
    response = Client().post("/metrics")

    assert_error(response, 405)


def test_metrics_are_not_part_of_the_api_document(client):
    paths = client.get("/api/v1/schema/").json()["paths"]

    assert not [path for path in paths if "metrics" in path]
