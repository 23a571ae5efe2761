"""Under gunicorn, as ``make serve`` runs it (``plumb_site/gunicorn_config.py``).

* GET /metrics: each worker process counts into its own file under
  ``var/metrics/``, and whichever worker answers the scrape sums them all.
  Requests are sent until the access log shows that both workers answered
  some, so a scrape that read only its own process's values would come out
  short.
* LOG_FORMAT=json: every line the server writes, gunicorn's included, is a
  JSON object, and the access log's carry the request's fields.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.scale.harness import PlumbServer, _opener, call, database_url, run_threads

pytestmark = pytest.mark.django_db(transaction=True)

PATH = "/api/v1/schema/fingerprint/"
LABELS = {"operation": "schema-fingerprint", "method": "GET", "status": "200"}


def counted(server: PlumbServer) -> float:
    """plumb_requests_total for the fingerprint, as one scrape reports it."""
    with _opener.open(f"{server.url}/metrics", timeout=30) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "plumb_requests_total" and sample.labels == LABELS:
                return sample.value
    return 0.0


def fingerprints_by_worker(server: PlumbServer) -> Counter:
    """Fingerprint requests answered per worker pid, from this start's access log."""
    served: Counter = Counter()
    for line in server.access_log.read_text().splitlines():
        pid, _status, _method, path = [*line.split(), "", "", ""][:4]
        if path == PATH:
            served[pid] += 1
    return served


def fetch(server: PlumbServer) -> None:
    with _opener.open(f"{server.url}{PATH}", timeout=30) as response:
        assert response.status == 200


def test_a_scrape_sums_the_counts_of_every_server_process(tmp_path):
    server = PlumbServer(database_url(), workdir=tmp_path / "server", workers=2, threads=4)
    server.start()
    try:
        sent = 0
        # Bounded: 12 rounds of 32 requests from 8 clients.
        for _ in range(12):
            run_threads(lambda _: [fetch(server) for _ in range(4)], 8, timeout=60)
            sent += 32
            if len(fingerprints_by_worker(server)) == 2:
                break
        served = fingerprints_by_worker(server)
        assert len(served) == 2, f"one worker answered every request: {served}"

        assert counted(server) == sent

        # A new start empties the folder: no count of the last run adds up with this one's.
        server.stop()
        server.start()
        assert counted(server) == 0
    finally:
        server.stop()


def test_with_log_format_json_every_server_line_is_a_json_object(tmp_path):
    server = PlumbServer(
        database_url(),
        workdir=tmp_path / "server",
        workers=1,
        threads=2,
        extra_env={"LOG_FORMAT": "json"},
    )
    server.start()
    try:
        assert call("GET", f"{server.url}/api/v1/notes/")[0] == 401
    finally:
        server.stop()

    written = server.server_log.read_text().splitlines()
    entries = [json.loads(line) for line in written]
    assert all({"time", "level", "logger", "message"} <= set(entry) for entry in entries)
    messages = [entry["message"] for entry in entries]
    assert messages[0].startswith("Starting gunicorn")  # gunicorn's own lines too
    assert messages[-1] == "Shutting down: Master"
    access = [json.loads(line) for line in server.access_log.read_text().splitlines()]
    refused = [entry for entry in access if entry.get("path") == "/api/v1/notes/"]
    assert len(refused) == 1
    assert refused[0]["logger"] == "gunicorn.access"
    assert (refused[0]["method"], refused[0]["status"]) == ("GET", 401)
    assert refused[0]["duration_ms"] > 0
