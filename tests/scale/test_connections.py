"""Idle connections cannot exhaust a real server, and clients that leave are logged 499
(issue 23, items 4 and 10).

The server runs as ``make serve`` runs it (gunicorn's asgi worker,
``plumb_site/asgi_worker.py``), one process, so that every connection lands on
the same event loop. Each test prints one figure line (``pytest -s``, and in
CI's output) and bounds every loop by count and time. The latency bound (an
answer within 1 s) is the issue's acceptance; a server that cannot accept a
connection does not answer at all, and these clients give up after 5 s.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import selectors
import socket
import subprocess
import sys
import threading
import time

import pytest
from django.conf import settings

from plumb_site.asgi_worker import FILE_RESERVE
from tests.factories import SessionFactory, WorkspaceFactory
from tests.scale.harness import (
    NETWORK_ERRORS,
    PlumbServer,
    _opener,
    call,
    connect,
    database_url,
    polls_waiting,
    read_kept_alive_response,
    read_response,
    report,
)
from tests.scale.silent_clients import SPARE_FILES

pytestmark = pytest.mark.django_db(transaction=True)

ANSWER_WITHIN = 1.0  # seconds: what /healthz and an authenticated call must meet
GIVE_UP_AFTER = 5.0  # seconds a client of these tests waits for any answer
SILENT = 20_000
PER_HELPER = 5_000  # connections one helper process holds, at most
HELPER_START_TIMEOUT = 120  # seconds for a helper to have tried all its connections

HEADER_TIMEOUT = 1  # PLUMB_HEADER_TIMEOUT of the tight server
MAX_CONNECTIONS = 40  # PLUMB_MAX_CONNECTIONS of the tight server


def start_server(tmp_path_factory, name: str, **env: str) -> PlumbServer:
    server = PlumbServer(
        database_url(), workdir=tmp_path_factory.mktemp(name), workers=1, extra_env=env
    )
    return server.start()


@pytest.fixture(scope="module")
def default_server(django_db_setup, tmp_path_factory):
    """One process with every connection setting at its default."""
    server = start_server(tmp_path_factory, "default-server")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def tight_server(django_db_setup, tmp_path_factory):
    """One process that holds few connections and waits little for a request head."""
    server = start_server(
        tmp_path_factory,
        "tight-server",
        PLUMB_HEADER_TIMEOUT=str(HEADER_TIMEOUT),
        PLUMB_MAX_CONNECTIONS=str(MAX_CONNECTIONS),
    )
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def tight(tight_server, transactional_db):
    tight_server.count_from_here()
    return tight_server


def timed(method: str, url: str, **kwargs) -> float:
    """Seconds to a 200 answer; ``inf`` when there was none within GIVE_UP_AFTER."""
    started = time.monotonic()
    try:
        status, body = call(method, url, timeout=GIVE_UP_AFTER, **kwargs)
    except NETWORK_ERRORS:
        return float("inf")
    assert status == 200, body
    return time.monotonic() - started


def ms(seconds: list[float]) -> str:
    return "/".join(f"{t * 1000:.1f}" for t in (max(seconds), sorted(seconds)[len(seconds) // 2]))


def worker_pid(server: PlumbServer) -> int:
    [pid] = [pid for pid in server.pids() if pid != server.process.pid]
    return pid


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def helper_counts(total: int) -> list[int]:
    """How many connections each helper process holds: as many as its file limit allows."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    per = PER_HELPER if hard == resource.RLIM_INFINITY else min(PER_HELPER, hard - SPARE_FILES)
    if per < 100:
        pytest.skip(f"a process may open only {hard} files here")
    return [min(per, total - start) for start in range(0, total, per)]


def log_bytes(server: PlumbServer) -> int:
    return sum(path.stat().st_size for path in (server.server_log, server.access_log))


# --- 20,000 silent connections ------------------------------------------------------------


def test_20000_silent_connections_leave_one_process_answering(default_server, transactional_db):
    server = default_server
    session = SessionFactory(workspace=WorkspaceFactory(slug="main"), name="alice")
    worker = worker_pid(server)
    logged_before = log_bytes(server)

    helpers: list[subprocess.Popen] = []
    opened = failed = 0
    files = [open_files(worker)]
    # While the connections pour in, a new one queues behind those the kernel
    # holds for the server to accept, and past its backlog the kernel drops it
    # and the client retries a second later: figures only, never asserted.
    ramp: list[float] = []
    ramping = threading.Event()
    prober = threading.Thread(target=probe, args=(server, ramp, ramping), daemon=True)
    started = time.monotonic()
    ramping.set()
    prober.start()
    try:
        for i, count in enumerate(helper_counts(SILENT)):
            helper = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.scale.silent_clients",
                    "127.0.0.1",
                    str(server.port),
                    f"127.0.0.{2 + i}",
                    str(count),
                ],
                cwd=settings.BASE_DIR,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            helpers.append(helper)
            line = read_line(helper, HELPER_START_TIMEOUT)
            files.append(open_files(worker))
            _, done, _, missed = line.split()
            opened += int(done)
            failed += int(missed)
        flood_seconds = time.monotonic() - started
        ramping.clear()
        prober.join(GIVE_UP_AFTER + 1)

        health, authed = [], []
        for _ in range(10):
            health.append(timed("GET", f"{server.url}/healthz"))
            authed.append(
                timed("GET", f"{server.url}/api/v1/sessions/current/", token=session.raw_token)
            )
            files.append(open_files(worker))
            time.sleep(0.1)
    finally:
        ramping.clear()
        for helper in helpers:
            helper.stdin.close()
        for helper in helpers:
            helper.wait(30)
    logged = log_bytes(server) - logged_before

    report(
        f"{SILENT} silent connections to one process",
        {
            "opened": f"{opened} in {flood_seconds:.1f} s by {len(helpers)} clients",
            "healthz while they opened max/p50 ms": ms(ramp),
            "healthz max/p50 ms": ms(health),
            "authenticated max/p50 ms": ms(authed),
            "worker files max": max(files),
            "log bytes": logged,
        },
        {
            "not_opened": failed,
            "slow_healthz": sum(t >= ANSWER_WITHIN for t in health),
            "slow_authenticated": sum(t >= ANSWER_WITHIN for t in authed),
            "server_5xx": server.server_errors(),
        },
    )
    assert opened == SILENT
    assert max(health) < ANSWER_WITHIN
    assert max(authed) < ANSWER_WITHIN
    assert max(files) < settings.PLUMB_MAX_CONNECTIONS + FILE_RESERVE
    assert logged < 1_000_000
    assert server.server_errors() == 0


def probe(server: PlumbServer, seconds: list[float], running: threading.Event) -> None:
    while running.is_set():
        seconds.append(timed("GET", f"{server.url}/healthz"))
        time.sleep(0.1)


def read_line(helper: subprocess.Popen, timeout: float) -> str:
    with selectors.DefaultSelector() as selector:
        selector.register(helper.stdout, selectors.EVENT_READ)
        if not selector.select(timeout):
            raise AssertionError(f"a helper tried its connections for over {timeout} s")
    return helper.stdout.readline()


# --- the header timeout ---------------------------------------------------------------------


def test_a_connection_that_sends_nothing_is_closed_after_the_header_timeout(tight):
    sock = connect(tight, timeout=10)
    try:
        started = time.monotonic()
        received = sock.recv(1024)
        took = time.monotonic() - started
    finally:
        sock.close()

    report("a silent connection", {"closed after s": f"{took:.2f}"}, {})
    assert received == b""


def test_a_request_head_that_stalls_gets_408_and_is_closed(tight):
    sock = connect(tight, timeout=10)
    try:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        status, headers, body = read_response(sock, 10)
    finally:
        sock.close()

    assert status == 408
    assert headers["content-type"] == "application/json"
    assert json.loads(body)["error"]["code"] == "request_timeout"


def test_a_kept_alive_connection_that_trickles_its_next_head_is_closed(tight):
    """A first request answered; the next head, trickled a byte every 0.2 s, is cut off."""
    sock = connect(tight, timeout=10)
    trickled = 0
    try:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        first = read_kept_alive_response(sock, 10)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        started = time.monotonic()
        sock.setblocking(False)
        answer = b""
        while time.monotonic() - started < 10:  # bounded: ten header timeouts
            with contextlib.suppress(BlockingIOError):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                answer += chunk
            with contextlib.suppress(BlockingIOError, BrokenPipeError, ConnectionResetError):
                sock.send(b"a")
                trickled += 1
            time.sleep(0.2)
        took = time.monotonic() - started
    finally:
        sock.close()

    report("a trickled second head", {"cut off after s": f"{took:.2f}", "bytes": trickled}, {})
    assert first[0] == 200
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["code"] == "request_timeout"
    assert took < 10


# --- the connection cap --------------------------------------------------------------------


def long_poll(server: PlumbServer, token: str, wait: int) -> socket.socket:
    sock = connect(server)
    sock.sendall(
        f"GET /api/v1/notes/?wait={wait} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {token}\r\nConnection: close\r\n\r\n".encode()
    )
    return sock


def wait_for_polls(server: PlumbServer, count: int) -> None:
    deadline = time.monotonic() + 30
    while polls_waiting(server) < count:
        assert time.monotonic() < deadline, f"never {count} polls waiting"
        time.sleep(0.1)


def closed_by_server(sockets: list[socket.socket]) -> int:
    """How many of ``sockets`` the server has closed (they read as at their end)."""
    closed = 0
    for sock in sockets:
        sock.setblocking(False)
        try:
            closed += sock.recv(1) == b""
        except BlockingIOError:
            pass
        except ConnectionResetError:
            closed += 1
    return closed


def test_past_the_cap_idle_connections_make_room_and_waiting_calls_are_never_cut(tight):
    workspace = WorkspaceFactory(slug="main")
    sender = SessionFactory(workspace=workspace, name="sender")
    agents = [SessionFactory(workspace=workspace, name=f"agent-{i}") for i in range(10)]
    polls = [long_poll(tight, agent.raw_token, 30) for agent in agents]
    silent: list[socket.socket] = []
    try:
        wait_for_polls(tight, len(polls))
        for _ in range(5 * MAX_CONNECTIONS):
            silent.append(connect(tight))
        health = [timed("GET", f"{tight.url}/healthz") for _ in range(5)]
        for agent in agents:
            status, body = call(
                "POST",
                f"{tight.url}/api/v1/notes/",
                token=sender.raw_token,
                body={"to": agent.name.handle, "body": "still here"},
            )
            assert status == 201, body
        answers = [read_response(sock, 30) for sock in polls]
        shed = closed_by_server(silent)
    finally:
        for sock in polls + silent:
            sock.close()

    delivered = sum(
        status == 200 and [n["body"] for n in json.loads(raw)["notes"]] == ["still here"]
        for status, _, raw in answers
    )
    report(
        f"{len(silent)} silent connections past a cap of {MAX_CONNECTIONS}, 10 polls waiting",
        {"silent ones closed": shed, "healthz max/p50 ms": ms(health)},
        {"polls_cut": len(polls) - delivered},
    )
    assert delivered == len(polls)
    assert shed >= len(silent) - MAX_CONNECTIONS
    assert max(health) < ANSWER_WITHIN


def test_when_every_connection_held_is_busy_a_new_one_is_refused_at_once(tight):
    """The cap filled with calls under way: 39 waiting polls and a body still arriving."""
    workspace = WorkspaceFactory(slug="main")
    agents = [SessionFactory(workspace=workspace, name=f"agent-{i}") for i in range(39)]
    polls = [long_poll(tight, agent.raw_token, 5) for agent in agents]
    uploading = None
    try:
        wait_for_polls(tight, len(polls))
        time.sleep(0.2)  # the scrape's connection is let go
        uploading = connect(tight)
        uploading.sendall(
            b"POST /api/v1/notes/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
        )
        time.sleep(0.2)
        refused = connect(tight)
        try:
            started = time.monotonic()
            status, headers, body = read_response(refused, GIVE_UP_AFTER)
            took = time.monotonic() - started
        finally:
            refused.close()
        answers = [read_response(sock, 30) for sock in polls]
    finally:
        for sock in [*polls, uploading]:
            if sock is not None:
                sock.close()
    after = timed("GET", f"{tight.url}/healthz")

    report(
        f"a connection past a cap of {MAX_CONNECTIONS} busy ones",
        {"refused in ms": f"{took * 1000:.1f}", "healthz after ms": f"{after * 1000:.1f}"},
        {"polls_not_answered": sum(answer[0] != 200 for answer in answers)},
    )
    assert status == 503
    assert headers["content-type"] == "application/json"
    assert headers["retry-after"] == "1"
    assert json.loads(body)["error"]["code"] == "too_many_connections"
    assert [answer[0] for answer in answers] == [200] * len(polls)
    assert after < ANSWER_WITHIN


# --- clients that leave ----------------------------------------------------------------------


def access_statuses(server: PlumbServer, path: str) -> list[int]:
    """Statuses the access log holds for ``path``, since the test began."""
    rows = ([*line.split(), "", "", ""][:4] for line in server.access_lines())
    return [int(status) for _, status, _, logged in rows if logged == path and status.isdigit()]


def requests_counted(server: PlumbServer, **labels: str) -> float:
    with _opener.open(f"{server.url}/metrics", timeout=30) as response:
        text = response.read().decode()
    wanted = ",".join(f'{name}="{value}"' for name, value in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(f"plumb_requests_total{{{wanted}}} "):
            return float(line.split()[1])
    return 0.0


def test_a_client_that_leaves_before_its_answer_is_logged_499(tight):
    workspace = WorkspaceFactory(slug="main")
    alice = SessionFactory(workspace=workspace, name="alice")
    labels = {"method": "GET", "operation": "notes", "status": "499"}
    counted_before = requests_counted(tight, **labels)

    uploading = connect(tight)
    uploading.sendall(
        b"POST /api/v1/notes/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
    )
    time.sleep(0.2)
    uploading.close()  # gone before its body arrived
    poll = long_poll(tight, alice.raw_token, 30)
    wait_for_polls(tight, 1)
    poll.close()  # gone while its call waited

    deadline = time.monotonic() + 10
    while len(access_statuses(tight, "/api/v1/notes/")) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    statuses = sorted(access_statuses(tight, "/api/v1/notes/"))
    counted = requests_counted(tight, **labels) - counted_before

    report("clients that left", {"logged": statuses, "counted 499": counted}, {})
    assert statuses == [499, 499]
    assert counted == 1
    assert polls_waiting(tight) == 0
