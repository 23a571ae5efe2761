"""plumb under real gunicorn, several worker processes, on the test's own database.

The tests in this package start the server the way ``make serve`` does
(gunicorn, 4 worker processes of 4 threads each) as a subprocess pointed at
the database pytest-django created for the test, and drive it over loopback
from threads of the test process. Rows the test seeds through the ORM are
committed (``django_db(transaction=True)``), so every server process sees
them, and the test reads the outcome back from the same database.

Nothing here is shared between server processes except the database: that is
the point. In-process shortcuts (the long-poll condition variable, the
throttle cache) only help requests that happen to land on the same worker.

The server gets its own process group (``start_new_session``), so that one
``killpg`` reaches the master and every worker at once: the crash tests kill
them all with SIGKILL, and teardown never leaves a worker behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from django.conf import settings
from django.db import connection

from rooms.models import Event, Message, Room

WORKERS = 4
THREADS = 4
STARTUP_TIMEOUT = 45  # seconds for gunicorn to answer /healthz; 4 Django imports on 2 cores
STOP_TIMEOUT = 10  # seconds between SIGTERM and SIGKILL
REQUEST_TIMEOUT = 60  # above SQLite's 30 s busy timeout, so a lock wait shows as such
BARRIER_TIMEOUT = 30
SECRET_KEY = "plumb-scale-tests-not-secret-" + "x" * 32
MAX_PAGES = 20

# Whatever the environment says about proxies, loopback goes direct.
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

# What a client sees when the server dies under it or is not there: the
# request may or may not have been applied.
NETWORK_ERRORS = (OSError, http.client.HTTPException)


# --- the database the server should use ------------------------------------------------


def database_url() -> str:
    """A DATABASE_URL for the database this test process is using right now.

    Inside a ``django_db`` test that is the test database (``test_…`` on
    PostgreSQL, ``var/test-<pid>.sqlite3`` on SQLite), not the one in settings.
    """
    config = connection.settings_dict
    name = str(config["NAME"])
    if connection.vendor == "sqlite":
        if name == ":memory:" or "mode=memory" in name:
            raise RuntimeError("an in-memory SQLite database cannot be shared with a server")
        return f"sqlite:///{Path(name).resolve()}"
    if connection.vendor == "postgresql":
        user = quote(config.get("USER") or "", safe="")
        password = quote(config.get("PASSWORD") or "", safe="")
        auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
        host = config.get("HOST") or ""
        if host.startswith("/"):
            host = quote(host, safe="")  # a Unix socket directory
        elif ":" in host:
            host = f"[{host}]"
        port = f":{config['PORT']}" if config.get("PORT") else ""
        return f"postgres://{auth}{host}{port}/{quote(name, safe='')}"
    raise RuntimeError(f"no DATABASE_URL for engine {config['ENGINE']}")


def vendor() -> str:
    return connection.vendor


# --- the server ------------------------------------------------------------------------


def _gunicorn() -> str:
    beside_python = Path(sys.executable).with_name("gunicorn")
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which("gunicorn")
    if found is None:
        raise RuntimeError("gunicorn is not installed in this environment")
    return found


try:
    _libc = ctypes.CDLL(None, use_errno=True)  # loaded here, never in a forked child
except OSError:
    _libc = None
PR_SET_PDEATHSIG = 1


def _die_with_test_process() -> None:
    """Runs in the server's child process before exec: should the test process
    die without tearing the server down (a killed pytest), the gunicorn master
    gets SIGTERM, and no server outlives the run. (Linux ties this to the
    thread that started the server, so servers are started from the main
    thread.)"""
    if _libc is not None and hasattr(_libc, "prctl"):
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, pgrp) of a process, or None once it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name is in parentheses and may itself hold spaces or ')'.
    fields = raw[raw.rindex(")") + 2 :].split()
    return fields[0], int(fields[1]), int(fields[2])


def live_pids_in_group(pgid: int) -> list[int]:
    """Processes of a group that still run. Zombies count as gone: once SIGKILL
    has landed they hold no socket, lock or connection, and whether anyone
    reaps an orphaned worker is up to the machine's init."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        stat = _proc_stat(int(entry.name))
        if stat is not None and stat[2] == pgid and stat[0] not in ("Z", "X"):
            pids.append(int(entry.name))
    return sorted(pids)


class ServerError(RuntimeError):
    pass


class PlumbServer:
    """One gunicorn master with its workers, serving plumb on a loopback port.

    ``start()`` binds the port in this process and hands the socket to gunicorn
    (``--bind fd://N``), so no other program can take the port between
    choosing and binding it, and a restart gets the same address back.
    """

    def __init__(
        self,
        db_url: str,
        *,
        workdir: Path,
        workers: int = WORKERS,
        threads: int = THREADS,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.db_url = db_url
        self.extra_env = extra_env or {}
        self.workdir = workdir
        self.workers = workers
        self.threads = threads
        self.port: int | None = None
        self.process: subprocess.Popen | None = None
        self.starts = 0
        # (start, byte offset in its access log) from which answered() counts.
        self.counting_from = (1, 0)
        self.var_dir = workdir / "var"
        self.var_dir.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def access_log(self) -> Path:
        return self.workdir / f"access-{self.starts}.log"

    @property
    def server_log(self) -> Path:
        return self.workdir / f"server-{self.starts}.log"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GUNICORN"))}
        env.update(
            DATABASE_URL=self.db_url,
            DJANGO_SETTINGS_MODULE="plumb_site.settings",
            PLUMB_RATE_SESSION="off",
            PLUMB_RATE_KEY="off",
            SECRET_KEY=SECRET_KEY,
            PLUMB_VAR_DIR=str(self.var_dir),
            DEBUG="false",
            LOG_LEVEL="WARNING",
            PYTHONUNBUFFERED="1",
            PLUMB_THREADS=str(self.threads),
        )
        env.update(self.extra_env)
        return env

    def start(self) -> PlumbServer:
        """Start gunicorn and wait until it answers /healthz. Call it from the
        main thread (see ``_die_with_test_process``)."""
        if self.process is not None and self.process.poll() is None:
            raise ServerError("the server is already running")
        self.starts += 1
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                listener.bind(("127.0.0.1", self.port or 0))
            except OSError:
                # Someone took the port while the server was down: clients
                # follow self.url, so any free port will do.
                listener.bind(("127.0.0.1", 0))
            self.port = listener.getsockname()[1]
            fd = listener.fileno()
            command = [
                _gunicorn(),
                "--config",
                "python:plumb_site.gunicorn_config",
                "--workers",
                str(self.workers),
                "--bind",
                f"fd://{fd}",
                "--no-control-socket",
                "--graceful-timeout",
                "5",
                "--access-logfile",
                str(self.access_log),
                # pid and status of every answered request: which workers served, any 5xx.
                "--access-logformat",
                "%(p)s %(s)s %(m)s %(U)s",
            ]
            with self.server_log.open("ab") as log:
                self.process = subprocess.Popen(
                    command,
                    cwd=settings.BASE_DIR,
                    env=self.env(),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    pass_fds=(fd,),
                    start_new_session=True,
                    preexec_fn=_die_with_test_process,
                )
        finally:
            # Gunicorn holds its own copy; ours must go, or a killed server's
            # port would keep accepting connections into a backlog nobody reads.
            listener.close()
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerError(
                    f"gunicorn exited with {self.process.returncode} at start:\n{self.log_tail()}"
                )
            try:
                # Waits as long as the start may take: the connection sits in
                # the listening socket's backlog until a worker has booted,
                # and a probe that gave up would be logged as the server's 500.
                remaining = max(1.0, deadline - time.monotonic())
                status, body = call("GET", f"{self.url}/healthz", timeout=remaining)
            except NETWORK_ERRORS:
                status, body = None, None
            if status == 200 and body == {"status": "ok"}:
                return
            time.sleep(0.1)
        raise ServerError(f"no healthy answer within {STARTUP_TIMEOUT} s:\n{self.log_tail()}")

    def healthy(self) -> bool:
        if self.process is None or self.process.poll() is not None:
            return False
        try:
            status, body = call("GET", f"{self.url}/healthz", timeout=10)
        except NETWORK_ERRORS:
            return False
        return status == 200 and body == {"status": "ok"}

    def pids(self) -> list[int]:
        """The master and its workers (everything in the server's process group)."""
        if self.process is None:
            return []
        return live_pids_in_group(self.process.pid)

    def kill(self) -> None:
        """SIGKILL every process of the server at once, as a power cut would (to
        the processes, not to the machine), and wait until none runs."""
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self._wait_group_gone(timeout=STOP_TIMEOUT)

    def stop(self) -> None:
        """SIGTERM (gunicorn's graceful stop), then SIGKILL whatever is left."""
        if self.process is None:
            return
        pgid = self.process.pid
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=STOP_TIMEOUT)
        if live_pids_in_group(pgid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
        self._wait_group_gone(timeout=STOP_TIMEOUT)

    def _wait_group_gone(self, *, timeout: float) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=timeout)
        while live_pids_in_group(self.process.pid):
            if time.monotonic() > deadline:
                raise ServerError(f"processes outlived SIGKILL: {self.pids()}")
            time.sleep(0.05)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.server_log.read_text(errors="replace")
        except FileNotFoundError:
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:])

    def count_from_here(self) -> None:
        """Count answered requests from now on only (a server shared by several tests)."""
        size = self.access_log.stat().st_size if self.access_log.exists() else 0
        self.counting_from = (self.starts, size)

    def access_lines(self) -> list[str]:
        """The access-log lines written since ``count_from_here``, over every start
        of this server: ``<pid> status method path`` each."""
        lines = []
        first, offset = self.counting_from
        for start in range(first, self.starts + 1):
            path = self.workdir / f"access-{start}.log"
            if not path.exists():
                continue
            with path.open("rb") as log:
                log.seek(offset if start == first else 0)
                lines.extend(log.read().decode(errors="replace").splitlines())
        return lines

    def answered(self) -> list[tuple[int, int]]:
        """(worker pid, status) of every request answered since ``count_from_here``,
        from the access logs."""
        rows = []
        for line in self.access_lines():
            pid, status, *_ = [*line.split(), "", ""]
            pid = pid.strip("<>")  # gunicorn writes the pid as <1234>
            if pid.isdigit() and status.isdigit():
                rows.append((int(pid), int(status)))
        return rows

    def workers_serving(self) -> Counter:
        """Requests answered per worker pid, counted like ``answered``."""
        return Counter(pid for pid, _ in self.answered())

    def server_errors(self) -> int:
        """Responses with a 5xx status, counted like ``answered``."""
        return sum(status >= 500 for _, status in self.answered())


# --- the client ------------------------------------------------------------------------


def call(
    method: str,
    url: str,
    *,
    token: str | None = None,
    body: dict | None = None,
    timeout: float = REQUEST_TIMEOUT,
) -> tuple[int, dict]:
    """One HTTP request with the stdlib, over a fresh connection.

    Returns ``(status, json)``, for error statuses too. A request the server
    never answered raises one of ``NETWORK_ERRORS``.
    """
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Accept", "application/json")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with _opener.open(request, timeout=timeout) as response:
            return response.status, _json(response.read())
    except urllib.error.HTTPError as error:
        return error.code, _json(error.read())


def connect(server: PlumbServer, *, timeout: float = 30) -> socket.socket:
    """A raw socket to the server, for a test that writes the bytes itself."""
    return socket.create_connection(("127.0.0.1", server.port), timeout=timeout)


def read_response(sock: socket.socket, timeout: float) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of the one response on ``sock`` (which then closes)."""
    sock.settimeout(timeout)
    raw = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        raw += chunk
    return _parse_response(raw)


def read_kept_alive_response(
    sock: socket.socket, timeout: float
) -> tuple[int, dict[str, str], bytes]:
    """One response on a connection that stays open: read up to its Content-Length."""
    sock.settimeout(timeout)
    raw = b""
    while b"\r\n\r\n" not in raw:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before a whole response head: {raw[:200]!r}")
        raw += chunk
    status, headers, body = _parse_response(raw)
    while len(body) < int(headers.get("content-length", 0)):
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before the whole response body")
        body += chunk
    return status, headers, body


def _parse_response(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, body


def _json(raw: bytes) -> dict:
    try:
        parsed = json.loads(raw or b"{}")
    except ValueError:
        return {"unparsed": raw[:200].decode(errors="replace")}
    return parsed if isinstance(parsed, dict) else {"unexpected": parsed}


def error_code(body: dict) -> str | None:
    error = body.get("error")
    return error.get("code") if isinstance(error, dict) else None


class Api:
    """The endpoints the scale tests use, on one server."""

    def __init__(self, server: PlumbServer) -> None:
        self.server = server

    @property
    def base(self) -> str:
        return f"{self.server.url}/api/v1"

    def start_session(self, key: str, workspace: str, name: str | None = None) -> tuple:
        body = {"workspace": workspace} | ({"name": name} if name else {})
        return call("POST", f"{self.base}/sessions/", token=key, body=body)

    def leave_note(self, token: str, **fields: Any) -> tuple:
        return call("POST", f"{self.base}/notes/", token=token, body=fields)

    def check_notes(self, token: str, *, wait: int | None = None) -> tuple:
        query = f"?wait={wait}" if wait else ""
        return call("GET", f"{self.base}/notes/{query}", token=token)

    def create_room(self, token: str, slug: str) -> tuple:
        return call("POST", f"{self.base}/rooms/", token=token, body={"slug": slug})

    def join(self, token: str, slug: str) -> tuple:
        return call("POST", f"{self.base}/rooms/{slug}/join", token=token, body={})

    def send(self, token: str, slug: str, **fields: Any) -> tuple:
        return call("POST", f"{self.base}/rooms/{slug}/messages/", token=token, body=fields)

    def read(self, token: str, slug: str, *, after_seq: int, limit: int = 500) -> tuple:
        url = f"{self.base}/rooms/{slug}/messages/?after_seq={after_seq}&limit={limit}"
        return call("GET", url, token=token)

    def read_all(self, token: str, slug: str) -> list[dict]:
        """Every event of a room from seq 1, following ``has_more`` (bounded)."""
        events: list[dict] = []
        after = 0
        for _ in range(MAX_PAGES):
            status, body = self.read(token, slug, after_seq=after)
            assert status == 200, body
            events.extend(body["events"])
            if not body["has_more"] or not body["events"]:
                return events
            after = body["events"][-1]["seq"]
        raise AssertionError(f"more than {MAX_PAGES} pages of events")

    def open_room(self, slug: str, tokens: list[str]) -> None:
        """The first token creates the room; the others join it."""
        status, body = self.create_room(tokens[0], slug)
        assert status == 201, body
        for token in tokens[1:]:
            status, body = self.join(token, slug)
            assert status == 201, body


# --- running clients -------------------------------------------------------------------


def run_threads(target: Callable[[int], Any], count: int, *, timeout: float) -> list[Any]:
    """Run ``target(i)`` for i in 0..count-1 on real threads; results in order.

    Each target bounds its own loops; ``timeout`` only guards against a hang
    (a thread stuck past it fails the test instead of blocking the run).
    """
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = target(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = sum(thread.is_alive() for thread in threads)
    if stuck:
        raise AssertionError(f"{stuck} client threads still running after {timeout} s")
    if errors:
        raise errors[0]
    return results


# --- checking and reporting ------------------------------------------------------------


def seq_violations(api_events: list[dict], room: Room) -> dict[str, int]:
    """How a room's stream breaks SPEC §1: seqs exactly 1..head_seq, unique, in
    order, the same through the API and in the database, each message at its
    event's seq."""
    head = room.head_seq
    expected = list(range(1, head + 1))
    api_seqs = [event["seq"] for event in api_events]
    db_events = list(Event.objects.filter(room=room).order_by("seq").values("seq", "kind"))
    db_seqs = [event["seq"] for event in db_events]
    db_message_event_seqs = [e["seq"] for e in db_events if e["kind"] == Event.Kind.MESSAGE]
    message_seqs = sorted(Message.objects.filter(room=room).values_list("seq", flat=True))
    return {
        "gaps": len(set(expected) - set(api_seqs)),
        "duplicate_seqs": len(api_seqs) - len(set(api_seqs)),
        "out_of_order": sum(a >= b for a, b in itertools.pairwise(api_seqs)),
        "beyond_head": sum(seq > head or seq < 1 for seq in api_seqs),
        "db_not_1_to_head": int(db_seqs != expected),
        "api_db_mismatch": int(api_seqs != db_seqs),
        "message_seq_mismatch": int(message_seqs != db_message_event_seqs),
    }


def nonzero(violations: dict[str, int]) -> dict[str, int]:
    return {name: n for name, n in violations.items() if n}


def report(
    title: str,
    figures: dict[str, Any],
    violations: dict[str, int],
    *,
    database: str | None = None,
) -> None:
    """One line per test in the output (``pytest -s``): what was done, what broke.

    ``database`` names the servers' database where it is not this process's.
    """
    done = ", ".join(f"{name} {value}" for name, value in figures.items())
    broken = nonzero(violations)
    print(
        f"\n[scale/{database or vendor()}] {title}: {done}; "
        f"violations {sum(violations.values())}{' ' + str(broken) if broken else ''}",
        flush=True,
    )


def polls_waiting(server: PlumbServer) -> float:
    """``plumb_polls_waiting`` summed over the server's processes (GET /metrics)."""
    with _opener.open(f"{server.url}/metrics", timeout=30) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("plumb_polls_waiting "):
                return float(line.split()[1])
    return 0.0


def workers_figure(server: PlumbServer) -> str:
    serving = server.workers_serving()
    return f"{len(serving)}/{server.workers} ({'/'.join(str(n) for n in serving.values())} req)"
