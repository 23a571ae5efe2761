"""No wake-up is lost under bursts of commits (issue 23, item 5; SPEC §3.3).

A real server (gunicorn, 2 processes of 8 threads, as ``make serve`` runs it)
holds 1,000 waiting calls parked on its event loops, and another process of
the host commits what wakes them: the test process the one commit, a child
process the burst (so that the test's own threads do not slow it). On SQLite
their datagrams go to the server's listeners (both use the server's
``VAR_DIR``), on PostgreSQL their NOTIFYs reach its LISTEN connections.

*Woken* is read from ``plumb_polls_waiting``, which a parked call leaves the
moment its wake-up reaches it, before its Django run: straight from the
server's metric files, sampled every few milliseconds, since a ``/metrics``
request would queue behind the thousand runs it measures. Answering takes
longer (each woken call runs Django once, on two shared cores); its figures
are printed, not asserted. The bound asserted, every waiter woken within
``WOKEN_WITHIN`` of its commit and none answered at its deadline, is
functional: a lost wake-up sleeps the whole ``WAIT``.
"""

from __future__ import annotations

import bisect
import json
import selectors
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.db import transaction
from prometheus_client import REGISTRY
from prometheus_client.multiprocess import MultiProcessCollector

from mailbox.services import optin_revoke
from rooms import services
from rooms.models import Member
from tests.factories import OptInFactory, ProjectFactory, SessionFactory, WorkspaceFactory
from tests.scale.harness import PlumbServer, database_url, report

WAITERS = 1_000
ROOMS = 50
WAIT = 20  # seconds each call asks to wait: an answer near it was never woken
WOKEN_WITHIN = 1.0  # seconds from a commit to the wake-up of every waiter it concerns
SAMPLE_EVERY = 0.005  # seconds between two readings of plumb_polls_waiting


@pytest.fixture(scope="module")
def wake_server(django_db_setup, tmp_path_factory):
    plumb = PlumbServer(
        database_url(), workdir=tmp_path_factory.mktemp("wake-server"), workers=2, threads=8
    )
    plumb.start()
    try:
        yield plumb
    finally:
        plumb.stop()


@pytest.fixture
def server(wake_server, transactional_db, settings):
    # This process's commits publish to the server's listeners, as its own would.
    settings.VAR_DIR = wake_server.var_dir
    wake_server.count_from_here()
    return wake_server


def asleep(server: PlumbServer) -> float:
    """``plumb_polls_waiting`` over the server's processes, from their metric files."""
    directory = Path(server.env().get("PROMETHEUS_MULTIPROC_DIR", server.var_dir / "metrics"))
    files = [str(path) for path in directory.glob("gauge_livesum_*.db")]
    for metric in MultiProcessCollector.merge(files, accumulate=False):
        for sample in metric.samples:
            if sample.name == "plumb_polls_waiting":
                return sample.value
    return 0.0


class Sampler(threading.Thread):
    """Reads ``asleep`` every ``SAMPLE_EVERY`` s until nobody sleeps or ``stop()``."""

    def __init__(self, server: PlumbServer) -> None:
        super().__init__(daemon=True)
        self.server = server
        self.samples: list[tuple[float, float]] = []  # (monotonic time, calls asleep)
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            value = asleep(self.server)
            self.samples.append((time.monotonic(), value))
            if value == 0:
                return
            time.sleep(SAMPLE_EVERY)

    def stop(self) -> None:
        self._halt.set()
        self.join(10)


def park(
    server: PlumbServer, requests: list[tuple[str, str]]
) -> tuple[list[socket.socket], list[float]]:
    """Send each (path, token) as a waiting call on a connection of its own, and when;
    returns once all are parked."""
    url = urlsplit(server.url)
    sockets, sent = [], []
    for path, token in requests:
        sock = socket.create_connection((url.hostname, url.port), timeout=30)
        sock.sendall(
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        sockets.append(sock)
        sent.append(time.monotonic())
    deadline = time.monotonic() + 60
    while asleep(server) < len(requests) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert asleep(server) == len(requests), "not every call parked"
    return sockets, sent


def at_deadline(got: list[tuple[int, dict, float]], sent: list[float]) -> int:
    """Answers that came when their wait ran out: their wake-up never did."""
    return sum(t - start >= WAIT - 1 for (_, _, t), start in zip(got, sent, strict=True))


def answers(sockets: list[socket.socket], *, timeout: float) -> list[tuple[int, dict, float]]:
    """Each socket's (status, JSON body, monotonic time complete), in the order given."""
    selector = selectors.DefaultSelector()
    buffers = {sock: bytearray() for sock in sockets}
    done: dict[socket.socket, tuple[int, dict, float]] = {}
    for sock in sockets:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while len(done) < len(sockets) and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=1):
            chunk = key.fileobj.recv(65536)
            if chunk:
                buffers[key.fileobj] += chunk
                continue
            selector.unregister(key.fileobj)
            head, _, raw = bytes(buffers[key.fileobj]).partition(b"\r\n\r\n")
            done[key.fileobj] = (int(head.split()[1]), json.loads(raw), time.monotonic())
    selector.close()
    return [done.get(sock, (0, {}, float("inf"))) for sock in sockets]


def late(samples: list[tuple[float, float]], commits: list[float]) -> int:
    """The most waiters seen asleep ``WOKEN_WITHIN`` after their commit at any one sample.

    Each waiter has one commit; a sample at ``t`` may show asleep only those
    whose commit came after ``t - WOKEN_WITHIN``.
    """
    commits = sorted(commits)
    # Fewer asleep than allowed (a sample taken as the polls were still being
    # parked, say) is no one late: never below zero.
    return max(
        [0]
        + [
            int(value - (len(commits) - bisect.bisect_right(commits, t - WOKEN_WITHIN)))
            for t, value in samples
        ]
    )


def ms(seconds: list[float], quantile: float) -> str:
    ordered = sorted(seconds)
    return f"{ordered[int(quantile * (len(ordered) - 1))] * 1000:.0f}"


def figures(samples, commits, answered, answered_after) -> dict[str, str]:
    """What both tests print: when the calls were woken, and when they answered."""
    first, last = min(commits), max(commits)
    woken_by: dict[int, float] = {}  # how many had been woken, and when first seen so
    for t, value in samples:
        woken_by.setdefault(int(len(commits) - value), t)

    def when(count: int) -> float:
        return min((t for n, t in woken_by.items() if n >= count), default=float("inf"))

    marks = [when(int(q * len(commits))) for q in (0.5, 0.99, 1)]
    return {
        "commits in ms": f"{(last - first) * 1000:.0f}",
        "woken p50/p99/all ms after the first commit": "/".join(
            f"{(t - first) * 1000:.0f}" for t in marks
        ),
        "all woken ms after the last commit": f"{(marks[-1] - last) * 1000:.0f}",
        "samples": str(len(samples)),
        "answered": f"{answered}/{len(commits)}",
        "answer p50/p99/max ms after its commit": "/".join(
            ms(answered_after, q) for q in (0.5, 0.99, 1)
        ),
    }


@pytest.mark.django_db(transaction=True)
def test_one_commit_wakes_1000_waiters_in_50_rooms_at_once(server):
    """An opt-in revoked: its guest leaves all 50 rooms in one commit (50 publications),
    and the 20 members waiting in each room are woken by its removal there."""
    workspace = WorkspaceFactory(slug="main")
    owner = SessionFactory(workspace=workspace, name="owner")
    guests = ProjectFactory(slug="guests")
    guest = SessionFactory(workspace=WorkspaceFactory(project=guests, slug="visit"), name="guest")
    OptInFactory(project=workspace.project, source=guests)
    waiters = [SessionFactory(workspace=workspace, name=f"waiter-{i}") for i in range(WAITERS)]
    rooms = []
    for r in range(ROOMS):
        room = services.room_create(owner, slug=f"room-{r}").room
        services.room_join(guest, room.slug)
        room.refresh_from_db()
        rooms.append(room)
    Member.objects.bulk_create(
        [
            Member(room=rooms[i % ROOMS], name_id=s.name_id, read_seq=rooms[i % ROOMS].head_seq)
            for i, s in enumerate(waiters)
        ]
    )
    sockets, sent = park(
        server,
        [
            (f"/api/v1/rooms/{rooms[i % ROOMS].slug}/messages/?wait={WAIT}", s.raw_token)
            for i, s in enumerate(waiters)
        ],
    )
    try:
        sampler = Sampler(server)
        sampler.start()
        held_before = REGISTRY.get_sample_value("plumb_wake_held_total") or 0
        committed: list[float] = []
        with transaction.atomic():
            # Registered first, so it runs at the commit before the publications go out.
            transaction.on_commit(lambda: committed.append(time.monotonic()))
            optin_revoke(workspace.project, source=guests, actor="test")
        held = (REGISTRY.get_sample_value("plumb_wake_held_total") or 0) - held_before
        got = answers(sockets, timeout=WAIT + 30)
        sampler.stop()
    finally:
        for sock in sockets:
            sock.close()

    answered = [
        status == 200 and [event["kind"] for event in body.get("events", [])] == ["moderation"]
        for status, body, _ in got
    ]
    commits = committed * WAITERS
    answered_after = [t - committed[0] for _, _, t in got]
    violations = {
        "late": late(sampler.samples, commits),
        "at_deadline": at_deadline(got, sent),
        "not_answered_with_the_removal": WAITERS - sum(answered),
        "server_5xx": server.server_errors(),
    }
    report(
        f"one commit, {WAITERS} waiters in {ROOMS} rooms",
        figures(sampler.samples, commits, sum(answered), answered_after)
        | {"held back (plumb_wake_held)": f"{held:.0f}"},
        violations,
    )
    assert violations == dict.fromkeys(violations, 0)


BURST = """
import json, sys, time
import django
django.setup()
from prometheus_client import REGISTRY
from mailbox.models import Session
from mailbox.services import note_leave
sender = Session.objects.select_related("name", "workspace__project").get(pk=int(sys.argv[1]))
print("ready", flush=True)
sys.stdin.readline()
commits = []
for n, handle in enumerate(sys.argv[2:]):
    commits.append(time.monotonic())  # no later than the commit
    note_leave(sender, to=handle, body=f"note {n}")
held = REGISTRY.get_sample_value("plumb_wake_held_total")
print(json.dumps({"commits": commits, "held": held}), flush=True)
"""


@pytest.mark.django_db(transaction=True)
def test_a_burst_of_1000_commits_wakes_each_of_1000_waiters_at_once(server):
    """A note for each of 1,000 waiting sessions, one commit each, as fast as another
    process of the host commits them; each waiter is woken by its own."""
    workspace = WorkspaceFactory(slug="main")
    sender = SessionFactory(workspace=workspace, name="sender")
    waiters = [SessionFactory(workspace=workspace, name=f"waiter-{i}") for i in range(WAITERS)]
    burst = subprocess.Popen(
        [sys.executable, "-c", BURST, str(sender.pk), *(s.name.handle for s in waiters)],
        env=server.env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert burst.stdout.readline() == "ready\n"
        requests = [(f"/api/v1/notes/?wait={WAIT}", s.raw_token) for s in waiters]
        sockets, sent = park(server, requests)
        try:
            sampler = Sampler(server)
            sampler.start()
            burst.stdin.write("go\n")
            burst.stdin.flush()
            burst_out = json.loads(burst.stdout.readline())
            got = answers(sockets, timeout=WAIT + 30)
            sampler.stop()
        finally:
            for sock in sockets:
                sock.close()
    finally:
        burst.stdin.close()
        exit_code = burst.wait(60)

    commits = burst_out["commits"]
    answered = [
        status == 200 and [note["body"] for note in body.get("notes", [])] == [f"note {n}"]
        for n, (status, body, _) in enumerate(got)
    ]
    answered_after = [t - commit for (_, _, t), commit in zip(got, commits, strict=True)]
    violations = {
        "late": late(sampler.samples, commits),
        "at_deadline": at_deadline(got, sent),
        "not_answered_with_its_note": WAITERS - sum(answered),
        "sender_failed": int(exit_code != 0),
        "server_5xx": server.server_errors(),
    }
    report(
        f"a burst of {WAITERS} commits, one waiter each",
        figures(sampler.samples, commits, sum(answered), answered_after)
        | {"held back (plumb_wake_held)": f"{burst_out['held'] or 0:.0f}"},
        violations,
    )
    assert violations == dict.fromkeys(violations, 0)
