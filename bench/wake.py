"""The wake phase: 1,000 idle long-polls held open, what they cost, how fast a note wakes one.

The polls are ``GET /api/v1/notes/?wait=30`` of 1,000 sessions, one keep-alive
connection each, all held by one thread of this process on non-blocking
sockets and one ``selectors`` loop (not 1,000 threads). A poll that answers
is checked (no notes, unless it was sent one: then exactly that note) and
issued again at once on its connection, so all of them stay held.

Measured, on the server(s) holding the polls:

* **held**: ``plumb_polls_waiting`` from ``GET /metrics`` (summed over the
  processes), which counts polls parked on the event loop, and how many
  answered early (empty, well before their ``wait``): a poll turned away.
* **idle CPU**: CPU seconds of every worker over a window with all of them
  held. *Quiescent*: the polls were issued together with ``wait=30``, so
  none ends in the window: the cost of holding them. *Steady*: the first
  ``wait`` of each is spread over 0-30 s, so about 1,000/30 polls end and are
  issued again every second, as 1,000 agents polling with ``wait=30`` would.
* **wake latency**: notes left (REST ``leave_note``, a few senders at once,
  paced) each to one waiting session, through *another process* than the one
  holding its poll: on one host, a connection that the kernel gave to the
  other worker (which process holds a connection is read from ``/proc``); on
  PostgreSQL, another server with its own ``var/`` (another host, as far as
  plumb can tell). Latency from the send's answer to the poll's answer (and
  from the send's start).
* **floor with and without them**: the floor phase run with the polls held
  (issued together, none ending) and with none, alternately (W N N W W N),
  median of each; then once more in the steady state, shown beside them.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import selectors
import socket
import statistics
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from load import Client, Operation, PhaseResult, run_phase, summarise
from ops import NOTE_BODY
from serving import HOST, Server, log

WAIT = 30.0  # seconds each poll asks to wait (the most plumb allows)
HOLD_TIMEOUT = 45.0  # seconds for every poll to be held, at most
QUIET_WINDOW = 5.0
STEADY_WINDOW = 10.0
WAKE_NOTES = 200
SENDERS = 4  # sender threads, each pausing between its notes
PACE = 0.04  # seconds a sender waits after each answer
EARLY = 1.0  # an empty answer this much before its wait was up is a poll turned away


class Pollers:
    """Long-polls of many sessions held open from one thread."""

    def __init__(self, port: int, agents: list[dict[str, Any]]):
        self.port = port
        self.agents = agents
        self.socks: list[socket.socket] = []
        self.buffers: list[bytearray] = []
        self.issued: list[tuple[float, float]] = []  # (when, wait) of each one's current poll
        self.expected: dict[int, str] = {}  # poller -> the tag of the note sent to it
        self.woken: dict[int, tuple[float, list[str]]] = {}
        self.answered = 0
        self.early = 0
        # Empty answers while a note was due: (poller, seconds since issued, wait asked).
        self.missed: list[tuple[int, float, float]] = []
        self.early_seen: list[tuple[int, float, float]] = []
        self.problems: list[str] = []
        self.lock = threading.Lock()
        self.selector: selectors.BaseSelector | None = None
        self.thread: threading.Thread | None = None
        self.stop = threading.Event()

    def _request(self, i: int, wait: float) -> bytes:
        self.issued[i] = (time.perf_counter(), wait)
        return (
            f"GET /api/v1/notes/?wait={wait:.3f} HTTP/1.1\r\nHost: {HOST}\r\n"
            f"Authorization: Bearer {self.agents[i]['token']}\r\n\r\n"
        ).encode()

    def _connect(self, i: int, wait: float) -> socket.socket:
        sock = socket.create_connection((HOST, self.port), timeout=10)
        sock.sendall(self._request(i, wait))
        sock.setblocking(False)
        return sock

    def open(self, first_wait: Callable[[int], float]) -> None:
        """Connect every poller and issue its first poll (``first_wait(i)`` seconds)."""
        self.stop.clear()
        self.selector = selectors.DefaultSelector()
        n = len(self.agents)
        self.issued = [(0.0, WAIT)] * n
        self.buffers = [bytearray() for _ in range(n)]
        self.socks = [self._connect(i, first_wait(i)) for i in range(n)]
        for i, sock in enumerate(self.socks):
            self.selector.register(sock, selectors.EVENT_READ, i)
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(10)
        for sock in self.socks:
            with contextlib.suppress(OSError):
                sock.close()
        if self.selector is not None:
            self.selector.close()
        self.socks, self.thread, self.selector = [], None, None

    def local_ports(self) -> list[int]:
        return [sock.getsockname()[1] for sock in self.socks]

    def _loop(self) -> None:
        assert self.selector is not None
        while not self.stop.is_set():
            for key, _ in self.selector.select(timeout=0.05):
                i = key.data
                try:
                    chunk = self.socks[i].recv(65536)
                except BlockingIOError:
                    continue
                except OSError as exc:
                    chunk = b""
                    self._problem(f"poller {i}: {exc}")
                if not chunk:
                    self._problem(f"poller {i}: the server closed its connection")
                    self._reconnect(i)
                    continue
                self.buffers[i] += chunk
                self._answers(i)

    def _answers(self, i: int) -> None:
        buffer = self.buffers[i]
        while True:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(buffer[:end]).decode("latin-1").split("\r\n")
            fields = {
                k.strip().lower(): v.strip()
                for k, _, v in (line.partition(":") for line in head[1:])
            }
            if "content-length" not in fields:
                self._problem(f"poller {i}: an answer without Content-Length: {head}")
                self._reconnect(i)
                return
            size = int(fields["content-length"])
            if len(buffer) < end + 4 + size:
                return
            at = time.perf_counter()
            body = bytes(buffer[end + 4 : end + 4 + size])
            del buffer[: end + 4 + size]
            self._answer(i, at, int(head[0].split()[1]), body)
            if fields.get("connection", "").lower() == "close":
                self._reconnect(i)
                return
            self.socks[i].send(self._request(i, WAIT))

    def _answer(self, i: int, at: float, status: int, body: bytes) -> None:
        issued, wait = self.issued[i]
        with self.lock:
            self.answered += 1
            if status != 200:
                self.problems.append(f"poller {i}: HTTP {status} {body[:200]!r}")
                return
            bodies = [note["body"] for note in json.loads(body)["notes"]]
            tag = self.expected.pop(i, None)
            if bodies:
                self.woken[i] = (at, bodies)
                if tag is None or bodies != [f"{NOTE_BODY} {tag}"]:
                    self.problems.append(f"poller {i} got {bodies!r:.200}, expected {tag}")
            elif tag is not None:
                self.expected[i] = tag  # answered empty though its note was sent: still due
                self.missed.append((i, round(at - issued, 3), wait))
            if not bodies and at - issued < wait - EARLY:
                self.early += 1
                self.early_seen.append((i, round(at - issued, 3), wait))

    def _reconnect(self, i: int) -> None:
        assert self.selector is not None
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(self.socks[i])
        self.socks[i].close()
        self.buffers[i] = bytearray()
        self.socks[i] = self._connect(i, WAIT)
        self.selector.register(self.socks[i], selectors.EVENT_READ, i)

    def _problem(self, text: str) -> None:
        with self.lock:
            self.problems.append(text)


# --- what the servers say ------------------------------------------------------------------


def polls_waiting(server: Server) -> float:
    """``plumb_polls_waiting`` summed over the server's processes (GET /metrics)."""
    with urllib.request.urlopen(f"http://{HOST}:{server.port}/metrics", timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("plumb_polls_waiting "):
                return float(line.split()[1])
    return 0.0


def wait_for_waiting(
    server: Server, low: float, high: float, *, timeout: float
) -> tuple[float, float]:
    """Until ``low`` to ``high`` polls wait (or ``timeout``): how many, after how long."""
    started = time.monotonic()
    waiting = polls_waiting(server)
    while not low <= waiting <= high and time.monotonic() - started < timeout:
        time.sleep(0.2)
        waiting = polls_waiting(server)
    return waiting, time.monotonic() - started


def connection_owners(server: Server) -> dict[int, int]:
    """Client port -> pid of the worker holding that connection, from ``/proc``."""
    inodes: dict[int, int] = {}
    for pid in server.worker_pids():
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    link = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if link.startswith("socket:["):
                        inodes[int(link[8:-1])] = pid
    owners = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                local, remote, inode = fields[1], fields[2], int(fields[9])
                if int(local.rpartition(":")[2], 16) == server.port and inode in inodes:
                    owners[int(remote.rpartition(":")[2], 16)] = inodes[inode]
    return owners


def polls_per_worker(server: Server, pollers: Any) -> list[int]:
    """How many of the pollers' connections each worker holds, fewest first.

    Read once they are all held: a connection still in the listening socket's
    queue belongs to no worker yet, and would be counted under none (0).
    """
    owners = connection_owners(server)
    per_worker: dict[int, int] = {}
    for port in pollers.local_ports():
        per_worker[owners.get(port, 0)] = per_worker.get(owners.get(port, 0), 0) + 1
    return sorted(per_worker.values())


def cpu_seconds(servers: list[Server]) -> float:
    return sum(server.worker_cpu_seconds() for server in servers)


def cpu_window(servers: list[Server], pollers: Pollers, seconds: float) -> dict[str, Any]:
    answered, cpu, started = pollers.answered, cpu_seconds(servers), time.perf_counter()
    time.sleep(seconds)
    took = time.perf_counter() - started
    used = cpu_seconds(servers) - cpu
    return {
        "cpu_pct_of_one_core": round(100 * used / took, 2),
        "polls_answered": pollers.answered - answered,
        "seconds": round(took, 2),
    }


# --- wake latency ----------------------------------------------------------------------------


def sender_connections(
    poll_server: Server, send_server: Server, token: str, threads: int
) -> list[dict[int, Client]]:
    """For each sender thread, a warm connection to each worker of ``send_server``
    (keyed by worker pid); on one server, connections the kernel gave to each worker."""
    pids = set(send_server.worker_pids())
    wanted = pids if send_server is poll_server else {0}
    conns: list[dict[int, Client]] = [{} for _ in range(threads)]
    spare: list[Client] = []
    for _ in range(20):
        if all(set(c) >= wanted for c in conns):
            break
        fresh = []
        for _ in range(2 * threads):
            client = Client(send_server.port)
            client.request("GET", "/api/v1/sessions/current/", token)
            fresh.append(client)
        owners = connection_owners(send_server) if send_server is poll_server else {}
        for client in fresh:
            assert client.conn is not None
            pid = owners.get(client.conn.sock.getsockname()[1], 0)
            home = next((c for c in conns if pid in wanted and pid not in c), None)
            if home is None:
                spare.append(client)
            else:
                home[pid] = client
    for client in spare:
        client.close()
    return conns


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


def wake_latency(
    pollers: Pollers, poll_server: Server, send_server: Server, senders: list[dict[str, Any]]
) -> dict[str, Any]:
    """``WAKE_NOTES`` notes, each to a waiting poller through another process than its own."""
    same_host = poll_server is send_server
    owners = connection_owners(poll_server)
    home = [owners.get(port, 0) for port in pollers.local_ports()]
    conns = sender_connections(poll_server, send_server, senders[0]["token"], SENDERS)
    chosen = random.Random(7).sample(range(len(pollers.agents)), WAKE_NOTES)
    sent: dict[int, tuple[float, float]] = {}
    problems: list[str] = []
    counter = iter(range(WAKE_NOTES))

    def sender(t: int) -> None:
        for j in counter:
            p = chosen[j]
            others = [c for pid, c in conns[t].items() if not same_host or pid != home[p]]
            if not others:
                problems.append(f"no connection to another process than {home[p]}'s")
                continue
            tag = f"(wake {j})"
            with pollers.lock:
                pollers.expected[p] = tag
            body = json.dumps({"to": pollers.agents[p]["name"], "body": f"{NOTE_BODY} {tag}"})
            started = time.perf_counter()
            status, data = others[0].request(
                "POST", "/api/v1/notes/", senders[t % len(senders)]["token"], body.encode()
            )
            sent[p] = (started, time.perf_counter())
            if status != 201:
                problems.append(f"HTTP {status} {data[:200]!r}")
            time.sleep(PACE)

    threads = [threading.Thread(target=sender, args=(t,)) for t in range(SENDERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(p not in pollers.woken for p in sent):
        time.sleep(0.05)
    for per in conns:
        for client in per.values():
            client.close()
    woken = [p for p in sent if p in pollers.woken]
    after_answer = [max(0.0, pollers.woken[p][0] - sent[p][1]) for p in woken]
    after_start = [pollers.woken[p][0] - sent[p][0] for p in woken]
    figures: dict[str, Any] = {
        "notes": WAKE_NOTES,
        "sent": len(sent),
        "woken": len(woken),
        "across": "processes of one host" if same_host else "hosts (two servers)",
        "answered_before_send_answer": sum(pollers.woken[p][0] < sent[p][1] for p in woken),
        # Polls that answered empty after their note was sent (then the next poll got it).
        "empty_while_due": len(pollers.missed),
        "empty_while_due_first": pollers.missed[:5],
        "over_1s": sum(x > 1.0 for x in after_answer),
        "problems": problems[:5],
    }
    if woken:
        for label, values in (("after_answer", after_answer), ("after_start", after_start)):
            figures[f"p50_ms_{label}"] = round(statistics.median(values) * 1000, 2)
            figures[f"p99_ms_{label}"] = round(_pct(values, 99) * 1000, 2)
            figures[f"max_ms_{label}"] = round(max(values) * 1000, 2)
    return figures


# --- the whole phase -------------------------------------------------------------------------


def run_wake(
    cfg: Any,
    poll_server: Server,
    send_server: Server,
    agents: list[dict[str, Any]],
    senders: list[dict[str, Any]],
    floor: Operation,
) -> dict[str, Any]:
    """Held polls, idle CPU (quiescent and steady), wake latency, floor with and without."""
    servers = [poll_server] if send_server is poll_server else [poll_server, send_server]
    pollers = Pollers(poll_server.port, agents)
    n = len(agents)
    result: dict[str, Any] = {"pollers": n, "workers": cfg.workers, "servers": len(servers)}

    def hold(first_wait: Callable[[int], float], low: float) -> tuple[float, float]:
        pollers.open(first_wait)
        return wait_for_waiting(poll_server, low, n, timeout=HOLD_TIMEOUT)

    def release() -> None:
        pollers.close()
        left, _ = wait_for_waiting(poll_server, 0, 0, timeout=HOLD_TIMEOUT)
        if left:
            pollers.problems.append(f"{left:.0f} polls still waiting after their clients left")

    try:
        held, after = hold(lambda i: WAIT, n)  # all together: none ends for 30 s
        per_worker = polls_per_worker(poll_server, pollers)
        result.update(held=held, held_after_s=round(after, 1), per_worker=per_worker)
        log(f"wake: {held:.0f} of {n} polls waiting after {after:.1f} s, per worker "
            f"{result['per_worker']}")  # fmt: skip
        result["quiet"] = cpu_window(servers, pollers, QUIET_WINDOW)
        log(f"wake: quiescent CPU {result['quiet']}")
        result["wake"] = wake_latency(pollers, poll_server, send_server, senders)
        log(f"wake: latency {result['wake']}")
        release()

        phases: dict[str, list[PhaseResult]] = {"with": [], "without": [], "steady": []}
        for r, mode in enumerate(["with", "without", "without", "with", "with", "without"]):
            if mode == "with" and not pollers.socks:
                # Issued together with wait=30: held, and none ends during the
                # (at most two) floor phases that follow.
                hold(lambda i: WAIT, n)
            elif mode == "without" and pollers.socks:
                release()
            phase = run_phase(
                poll_server, floor, clients=cfg.clients, requests=cfg.requests, cap=cfg.phase_cap
            )
            phases[mode].append(phase)
            log(f"wake: floor {mode:7} {phase.throughput:8.1f}/s errors {phase.errors} ({r + 1}/6)")
        # The steady state of 1,000 agents polling with wait=30: first waits spread
        # over 0-30 s, so about 33 polls end and are issued again every second.
        hold(lambda i: WAIT * (i + 1) / n, 0.98 * n)
        result["steady"] = cpu_window(servers, pollers, STEADY_WINDOW)
        log(f"wake: steady CPU {result['steady']}")
        phase = run_phase(
            poll_server, floor, clients=cfg.clients, requests=cfg.requests, cap=cfg.phase_cap
        )
        phases["steady"].append(phase)
        log(f"wake: floor steady  {phase.throughput:8.1f}/s errors {phase.errors}")
        release()
    finally:
        pollers.close()
    result["floor_with"] = summarise(phases["with"])
    result["floor_without"] = summarise(phases["without"])
    result["floor_steady"] = summarise(phases["steady"])
    result["early_answers"] = pollers.early
    result["early_first"] = pollers.early_seen[:5]
    result["problems"] = pollers.problems[:10]
    result["problem_count"] = len(pollers.problems)
    return result
