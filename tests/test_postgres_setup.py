"""scripts/with-postgres: a throwaway PostgreSQL cluster around one command.

These start real clusters. Where PostgreSQL's server binaries are missing the
script installs Debian's package itself (as root), so these never skip.
"""

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.throwaway import interrupted_report

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "with-postgres"


# Runs under the script: reports what the server looks like, then exits with argv[1].
PROBE = """
import json, os, sys, time
import psycopg
url = os.environ["DATABASE_URL"]
with psycopg.connect(url, autocommit=True) as conn:
    shown = {
        name: conn.execute(f"SHOW {name}").fetchone()[0]
        for name in ("fsync", "max_connections", "listen_addresses", "server_encoding",
                     "data_directory", "server_version_num")
    }
    shown["tables"] = conn.execute(
        "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
    ).fetchone()[0]
    conn.execute("CREATE TABLE scratch (id int)")
print(json.dumps({"url": url, **shown}), flush=True)
if sys.argv[2] == "sleep":
    time.sleep(120)
sys.exit(int(sys.argv[1]))
"""


def probe_command(status: int, then: str = "exit") -> list[str]:
    return [str(SCRIPT), sys.executable, "-c", PROBE, str(status), then]


def assert_cluster_is_gone(report: dict) -> None:
    assert not Path(report["data_directory"]).parent.exists()
    # Nothing listens any more: the server was stopped, not just its files deleted.
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", urlsplit(report["url"]).port), timeout=5).close()


def test_the_command_gets_a_fresh_durable_loopback_database_and_its_exit_status_is_kept():
    run = subprocess.run(probe_command(3), capture_output=True, text=True, timeout=300)

    assert run.returncode == 3, run.stderr
    report = json.loads(run.stdout.splitlines()[-1])
    url = urlsplit(report["url"])
    assert (url.scheme, url.username, url.hostname, url.path) == (
        "postgres",
        "postgres",
        "127.0.0.1",
        "/plumb",
    )
    assert f"127.0.0.1:{url.port}" in run.stderr  # the one line saying what it started
    assert report["tables"] == 0
    assert report["fsync"] == "on"
    assert report["max_connections"] == "200"
    assert report["listen_addresses"] == "127.0.0.1"
    assert report["server_encoding"] == "UTF8"
    if "PLUMB_PG_BIN" not in os.environ:
        assert report["server_version_num"].startswith("15")
    assert_cluster_is_gone(report)


@pytest.mark.parametrize(
    ("sent", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl-c", "term"]
)
def test_an_interrupted_run_still_stops_and_removes_the_cluster(sent, status):
    report = interrupted_report(probe_command(0, "sleep"), sent, status)
    assert_cluster_is_gone(report)
