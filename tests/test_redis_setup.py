"""scripts/with-redis: a throwaway Redis server around one command.

These start real servers. Where redis-server is missing the script installs
Debian's package itself (as root), so these never skip.
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

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "with-redis"


# Runs under the script: reports what the server looks like, then exits with argv[1].
PROBE = """
import json, os, sys, time
import redis
url = os.environ["REDIS_URL"]
client = redis.Redis.from_url(url, decode_responses=True)
client.set("scratch", "1")
shown = {
    name: client.config_get(name)[name]
    for name in ("save", "appendonly", "bind", "dir", "protected-mode")
}
print(json.dumps({"url": url, "ping": client.ping(), **shown}), flush=True)
if sys.argv[2] == "sleep":
    time.sleep(120)
sys.exit(int(sys.argv[1]))
"""


def probe_command(status: int, then: str = "exit") -> list[str]:
    return [str(SCRIPT), sys.executable, "-c", PROBE, str(status), then]


def assert_server_is_gone(report: dict) -> None:
    assert not Path(report["dir"]).exists()
    # Nothing listens any more: the server was stopped, not just its files deleted.
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", urlsplit(report["url"]).port), timeout=5).close()


def test_the_command_gets_a_fresh_loopback_redis_without_persistence_and_its_status_is_kept():
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    run = subprocess.run(probe_command(3), capture_output=True, text=True, timeout=300, env=env)

    assert run.returncode == 3, run.stderr
    report = json.loads(run.stdout.splitlines()[-1])
    url = urlsplit(report["url"])
    assert (url.scheme, url.hostname, url.path) == ("redis", "127.0.0.1", "/0")
    assert f"127.0.0.1:{url.port}" in run.stderr  # the one line saying what it started
    assert report["ping"] is True
    assert (report["save"], report["appendonly"]) == ("", "no")
    assert report["bind"] == "127.0.0.1"
    assert report["protected-mode"] == "yes"
    assert_server_is_gone(report)


@pytest.mark.parametrize(
    ("sent", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl-c", "term"]
)
def test_an_interrupted_run_still_stops_the_server_and_removes_its_files(sent, status):
    report = interrupted_report(probe_command(0, "sleep"), sent, status)
    assert_server_is_gone(report)
