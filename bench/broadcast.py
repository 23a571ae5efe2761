"""The broadcast phase: 1,000 members of one room wait in ``read_messages``; one message wakes them.

Each of the first 1,000 sessions of the pool is a member of the room ``hall``
(``bench/seed.py``), has read it all, and long-polls
``GET /api/v1/rooms/hall/messages/?wait=30`` on its own keep-alive connection,
all of them held by one thread of this process on non-blocking sockets and
one ``selectors`` loop, as in the wake phase (``bench/wake.py``). Once
``plumb_polls_waiting`` says all of them are held, the room's speaker sends one
message (through the other server on PostgreSQL, as the wake phase's notes
go). Every poll must answer ``200`` with exactly that message and its
``read_seq`` at the message's seq; none is issued again until every one has
answered (or ``ANSWER_WITHIN`` has passed), so that the figures are those of
one message waking them all, not of the polls that follow. Then the next
round: ``ROUNDS`` messages, bounded by count and time.

Figures: latency from the send's start to each poll's answer, and from the
send's answer (0 when the poll answered first), pooled over the rounds;
how many answered and how; CPU of every worker during the round, per woken
read.
"""

from __future__ import annotations

import contextlib
import json
import selectors
import socket
import statistics
import threading
import time
from typing import Any

from load import Client
from serving import HOST, Server, log
from wake import _pct, cpu_seconds, polls_per_worker, wait_for_waiting

ROUNDS = 3
WAIT = 30.0
HOLD_TIMEOUT = 45.0  # seconds for every poll to be held, at most
ANSWER_WITHIN = 30.0  # seconds for every poll to answer a message, at most
# Seconds between "all held" and the message: past PLUMB_SEEN_WRITE_INTERVAL (5 s), so
# that each woken read also refreshes its session's last_seen_at, as a read woken
# after waiting for longer than that does.
SETTLE = 6.0


class RoomPollers:
    """Long-polls of a room's members held open from one thread; each issued on demand."""

    def __init__(self, port: int, room: str, agents: list[dict[str, Any]]):
        self.port = port
        self.room = room
        self.agents = agents
        self.socks: list[socket.socket] = []
        self.buffers: list[bytearray] = []
        self.answers: dict[int, tuple[float, int, bytes]] = {}
        self.problems: list[str] = []
        self.lock = threading.Lock()
        self.selector = selectors.DefaultSelector()
        self.thread: threading.Thread | None = None
        self.stop = threading.Event()

    def _request(self, i: int) -> bytes:
        return (
            f"GET /api/v1/rooms/{self.room}/messages/?wait={WAIT:g} HTTP/1.1\r\nHost: {HOST}\r\n"
            f"Authorization: Bearer {self.agents[i]['token']}\r\n\r\n"
        ).encode()

    def open(self) -> None:
        for i in range(len(self.agents)):
            sock = socket.create_connection((HOST, self.port), timeout=30)
            sock.setblocking(False)
            self.socks.append(sock)
            self.buffers.append(bytearray())
            self.selector.register(sock, selectors.EVENT_READ, i)
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def issue_all(self) -> None:
        with self.lock:
            self.answers.clear()
        for i, sock in enumerate(self.socks):
            request = self._request(i)
            sock.setblocking(True)
            sock.sendall(request)
            sock.setblocking(False)

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(10)
        for sock in self.socks:
            with contextlib.suppress(OSError):
                sock.close()
        self.selector.close()

    def local_ports(self) -> list[int]:
        return [sock.getsockname()[1] for sock in self.socks]

    def _loop(self) -> None:
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
                    self.selector.unregister(self.socks[i])
                    continue
                self.buffers[i] += chunk
                self._parse(i)

    def _parse(self, i: int) -> None:
        buffer = self.buffers[i]
        end = buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        head = bytes(buffer[:end]).decode("latin-1").split("\r\n")
        fields = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:])}
        length = int(fields["content-length"]) if "content-length" in fields else None
        if length is None:
            self._problem(f"poller {i}: an answer without Content-Length: {head}")
            return
        if len(buffer) < end + 4 + length:
            return
        at = time.perf_counter()
        body = bytes(buffer[end + 4 : end + 4 + length])
        del buffer[: end + 4 + length]
        with self.lock:
            self.answers[i] = (at, int(head[0].split()[1]), body)

    def _problem(self, text: str) -> None:
        with self.lock:
            self.problems.append(text)


def _one_round(
    pollers: RoomPollers, poll_server: Server, sender: Client, speaker: dict[str, Any], r: int,
    servers: list[Server],
) -> dict[str, Any]:  # fmt: skip
    n = len(pollers.agents)
    pollers.issue_all()
    held, after = wait_for_waiting(poll_server, n, n, timeout=HOLD_TIMEOUT)
    per_worker = polls_per_worker(poll_server, pollers)
    time.sleep(SETTLE)
    body = json.dumps({"body": f"broadcast {r}: the release is tagged, please pull"}).encode()
    cpu = cpu_seconds(servers)
    started = time.perf_counter()
    path = f"/api/v1/rooms/{pollers.room}/messages/"
    status, data = sender.request("POST", path, speaker["token"], body)
    answered = time.perf_counter()
    problems: list[str] = []
    if status != 201:
        problems.append(f"send: HTTP {status} {data[:200]!r}")
        return {"held": held, "per_worker": per_worker, "problems": problems, "answered": 0}
    message = json.loads(data)["message"]
    deadline = time.monotonic() + ANSWER_WITHIN
    while time.monotonic() < deadline:
        with pollers.lock:
            if len(pollers.answers) >= n:
                break
        time.sleep(0.01)
    finished = time.perf_counter()
    used = cpu_seconds(servers) - cpu
    with pollers.lock:
        answers = dict(pollers.answers)
    after_start, after_answer = [], []
    for i, (at, got_status, raw) in sorted(answers.items()):
        if got_status != 200:
            problems.append(f"poller {i}: HTTP {got_status} {raw[:200]!r}")
            continue
        read = json.loads(raw)
        ids = [e.get("message", {}).get("id") for e in read["events"]]
        if ids != [message["id"]] or read["read_seq"] != message["seq"]:
            problems.append(f"poller {i}: events {ids}, read_seq {read['read_seq']}")
            continue
        after_start.append(at - started)
        after_answer.append(max(0.0, at - answered))
    missing = n - len(answers)
    if missing:
        problems.append(f"{missing} polls did not answer within {ANSWER_WITHIN:g} s")
    return {
        "held": held,
        "held_after_s": round(after, 1),
        "per_worker": per_worker,
        "answered": len(after_start),
        "after_start": after_start,
        "after_answer": after_answer,
        "send_ms": round((answered - started) * 1000, 2),
        "all_answered_s": round(max(after_start, default=0.0), 3),
        "server_cpu_ms_per_read": round(used * 1000 / max(len(answers), 1), 2),
        "window_s": round(finished - started, 2),
        "problems": problems,
    }


def run_broadcast(
    poll_server: Server, send_server: Server, room: str, agents: list[dict[str, Any]],
    speaker: dict[str, Any],
) -> dict[str, Any]:  # fmt: skip
    """``ROUNDS`` messages, each waking every member of ``room`` waiting in ``read_messages``."""
    servers = [poll_server] if send_server is poll_server else [poll_server, send_server]
    pollers = RoomPollers(poll_server.port, room, agents)
    sender = Client(send_server.port)
    rounds = []
    try:
        pollers.open()
        for r in range(ROUNDS):
            figures = _one_round(pollers, poll_server, sender, speaker, r, servers)
            rounds.append(figures)
            shown = {k: v for k, v in figures.items() if k not in ("after_start", "after_answer")}
            if figures["after_start"]:
                shown["p50_ms"] = round(statistics.median(figures["after_start"]) * 1000, 1)
                shown["p99_ms"] = round(_pct(figures["after_start"], 99) * 1000, 1)
            log(f"broadcast {r + 1}/{ROUNDS}: {shown}")
            if figures["problems"]:
                break
    finally:
        sender.close()
        pollers.close()
    after_start = [x for f in rounds for x in f.get("after_start", [])]
    after_answer = [x for f in rounds for x in f.get("after_answer", [])]
    result: dict[str, Any] = {
        "pollers": len(agents),
        "rounds": len(rounds),
        "messages": ROUNDS,
        # Counted once the first message's polls were all held (see polls_per_worker).
        "per_worker": rounds[0].get("per_worker") if rounds else None,
        "answered": sum(f["answered"] for f in rounds),
        "expected": len(agents) * ROUNDS,
        "problems": [*pollers.problems, *(p for f in rounds for p in f["problems"])][:10],
        "problem_count": len(pollers.problems) + sum(len(f["problems"]) for f in rounds),
        "round_p99_ms": [
            round(_pct(f["after_start"], 99) * 1000, 1) for f in rounds if f.get("after_start")
        ],
        "server_cpu_ms_per_read": [f.get("server_cpu_ms_per_read") for f in rounds],
        "send_ms": [f.get("send_ms") for f in rounds],
    }
    for label, values in (("after_start", after_start), ("after_answer", after_answer)):
        if values:
            result[f"p50_ms_{label}"] = round(statistics.median(values) * 1000, 1)
            result[f"p99_ms_{label}"] = round(_pct(values, 99) * 1000, 1)
            result[f"max_ms_{label}"] = round(max(values) * 1000, 1)
    return result
