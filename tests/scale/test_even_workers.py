"""A burst of connections is shared between gunicorn's processes (plumb_site/accept.py).

The server runs as ``make serve`` runs it, with two processes. A burst of
connections opens, every one complete in the listening socket's backlog,
before any request is sent; then one request goes over each, which stays
open, and the kernel's tables say which process holds its other end. Left
to the kernel and uvloop, the first process awake takes every connection
waiting; plumb's workers take turns. The figure line (``pytest -s``) gives
the shares.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.scale.harness import (
    PlumbServer,
    connect,
    database_url,
    read_kept_alive_response,
    report,
)

pytestmark = pytest.mark.django_db(transaction=True)

WORKERS = 2
BURST = 8
ROUNDS = 8
ANSWER_WITHIN = 10.0  # seconds: the clients' bound on each answer
BOTH_ACCEPTING_WITHIN = 30.0  # seconds for the second process to start accepting
REQUEST = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


@pytest.fixture(scope="module")
def two_workers(django_db_setup, tmp_path_factory):
    server = PlumbServer(
        database_url(), workdir=tmp_path_factory.mktemp("two-workers"), workers=WORKERS
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def held(connections: list[socket.socket]):
    try:
        yield connections
    finally:
        for connection in connections:
            connection.close()


def ask(connection: socket.socket) -> int:
    connection.sendall(REQUEST)
    return read_kept_alive_response(connection, ANSWER_WITHIN)[0]


ESTABLISHED, CLOSE_WAIT = "01", "08"  # the states of /proc/net/tcp that a worker still holds


def _server_ends(port: int, states: tuple[str, ...] = (ESTABLISHED,)) -> dict[int, int]:
    """Connections to ``port`` in ``states``: the client's port -> the socket's inode (Linux)."""
    ends = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError):
            for row in Path(table).read_text().splitlines()[1:]:
                fields = row.split()
                local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
                if state in states and int(local.rsplit(":", 1)[1], 16) == port:
                    ends[int(remote.rsplit(":", 1)[1], 16)] = int(inode)
    return ends


def holders(server: PlumbServer, connections: list[socket.socket]) -> Counter:
    """How many of ``connections`` each worker process holds."""
    owner = {}
    for pid in server.pids():
        with contextlib.suppress(FileNotFoundError, PermissionError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(FileNotFoundError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.startswith("socket:["):
                        owner[int(target[8:-1])] = pid
    ends = _server_ends(server.port)
    return Counter(owner.get(ends.get(c.getsockname()[1])) for c in connections)


def wait_until_released(server: PlumbServer) -> None:
    """The workers closed their ends of the last round's connections, so count none of them.

    A client's close leaves the server's end in CLOSE_WAIT until the worker
    has read the end and closed it too, which is when it stops counting it.
    """
    held_states = (ESTABLISHED, CLOSE_WAIT)
    deadline = time.monotonic() + ANSWER_WITHIN
    while _server_ends(server.port, held_states) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _server_ends(server.port, held_states)


def wait_until_every_process_accepts(server: PlumbServer) -> None:
    """``start()`` returns once one process answers; the other may still be loading.

    Connections are opened and kept one at a time, each after the last was
    answered, until every process holds one: a process that accepts holds
    fewer than the first, so it takes the next connection.
    """
    deadline = time.monotonic() + BOTH_ACCEPTING_WITHIN
    with held([]) as connections:
        while time.monotonic() < deadline:
            connections.append(connect(server))
            assert ask(connections[-1]) == 200
            if len(holders(server, connections)) == WORKERS:
                break
            time.sleep(0.05)
        assert len(holders(server, connections)) == WORKERS
    wait_until_released(server)


def test_a_burst_of_connections_is_shared_between_the_processes(two_workers):
    wait_until_every_process_accepts(two_workers)
    shares = []
    for _ in range(ROUNDS):
        with held([connect(two_workers) for _ in range(BURST)]) as connections:
            statuses = [ask(connection) for connection in connections]
            share = holders(two_workers, connections)
        assert statuses == [200] * BURST
        assert None not in share
        shares.append(sorted(share.values()))
        wait_until_released(two_workers)
    even = [BURST // WORKERS] * WORKERS
    uneven = sum(share != even for share in shares)
    report(
        "a burst of connections",
        {"bursts": ROUNDS, "each": BURST, "shares": shares},
        {"uneven": uneven},
    )

    assert shares == [even] * ROUNDS
