"""Crash durability (issue 6, item 3): nothing acknowledged is lost to ``kill -9``.

Client threads send notes and room messages, every one with an idempotency
key, to plumb under gunicorn (4 worker processes). Mid-stream every server
process, master and workers, gets SIGKILL at once; the server restarts on the
same database and port. Then:

* every write that got a 2xx before the kill is stored, exactly once, under
  the id its response named (and a retry of it replays that id);
* the room's seqs are still exactly 1..head_seq;
* every request that was in flight or unanswered at the kill, retried with
  its idempotency key, either replays (200, ``replayed``) because it had
  committed, or is stored now (201) because it had not: never twice.

The figure line gives the sends acknowledged, in flight at the kill, retried,
and the duplicates and losses found.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass

import pytest
from django.db import connection

from mailbox.models import Note, Project
from rooms.models import Message, Room
from tests.factories import SessionFactory, WorkspaceFactory
from tests.scale.harness import (
    NETWORK_ERRORS,
    nonzero,
    report,
    run_threads,
    seq_violations,
)

ROUNDS = 2  # kill, restart, retry; then again on the restarted server
NOTE_CLIENTS = ROOM_CLIENTS = 4
ACKED_BEFORE_KILL = 40  # writes acknowledged in a round before the kill ...
MAX_SEND_PHASE = 10  # ... or this many seconds, whichever comes first
HUNT_SECONDS = 3  # then up to this long for a write committed but not yet answered
MAX_OPS_PER_CLIENT = 500
RETRY_TIMEOUT = 30
ROOM = "crash"


@dataclass
class Op:
    """One write with its idempotency key, and what the client learnt of it."""

    kind: str  # "note" or "message"
    client: int
    key: str
    body: str
    outcome: str = "pending"  # acked | unanswered | refused
    status: int | None = None
    id: str | None = None
    error: str = ""


def connection_refused(error: BaseException) -> bool:
    reason = getattr(error, "reason", error)
    return isinstance(reason, ConnectionRefusedError)


class Clients:
    """The writing clients (threads), everything they sent, and what they learnt."""

    def __init__(self, api, clients: list[tuple[str, object]]) -> None:
        self.api = api
        self.clients = clients
        self.ops: list[Op] = []
        self.lock = threading.Lock()
        self.in_flight: dict[int, Op] = {}
        self.acked = 0
        self.stop = threading.Event()

    def token(self, op: Op) -> str:
        return self.clients[op.client][1].raw_token

    def handle(self, op: Op) -> str:
        return self.clients[op.client][1].name.handle

    def write(self, op: Op) -> tuple[int, dict]:
        if op.kind == "note":
            return self.api.leave_note(
                self.token(op), body=op.body, to="bob", idempotency_key=op.key
            )
        return self.api.send(self.token(op), ROOM, body=op.body, idempotency_key=op.key)

    @staticmethod
    def record(op: Op, status: int, body: dict) -> None:
        op.status = status
        if status in (200, 201):
            op.outcome = "acked"
            op.id = body.get("note" if op.kind == "note" else "message", {}).get("id")
        elif status >= 500:
            op.outcome = "unanswered"  # the client cannot know: it must retry
        else:
            op.outcome = "refused"

    def send_until_stopped(self, i: int, round_no: int) -> None:
        kind = self.clients[i][0]
        for n in range(MAX_OPS_PER_CLIENT):
            if self.stop.is_set():
                return
            op = Op(
                kind, i, f"r{round_no}-c{i}-{n}", f"{kind} {n} from client {i}, round {round_no}"
            )
            with self.lock:
                self.ops.append(op)
                self.in_flight[i] = op
            try:
                status, body = self.write(op)
            except NETWORK_ERRORS as error:
                op.outcome = "unanswered"
                op.error = "refused" if connection_refused(error) else type(error).__name__
                return  # the server is gone: this client waits for the restart
            finally:
                with self.lock:
                    self.in_flight.pop(i, None)
            self.record(op, status, body)
            if op.outcome == "acked":
                with self.lock:
                    self.acked += 1

    def committed_unanswered(self) -> int:
        """In-flight writes whose row is already committed: the client has no
        answer yet, but a retry must replay rather than store them again."""
        with self.lock:
            waiting = list(self.in_flight.values())
        notes = [op.key for op in waiting if op.kind == "note"]
        messages = [op.key for op in waiting if op.kind == "message"]
        committed = 0
        if notes:
            committed += Note.objects.filter(idempotency_key__in=notes).count()
        if messages:
            committed += Message.objects.filter(idempotency_key__in=messages).count()
        return committed

    def kill_when_busy(self, server) -> dict:
        """SIGKILL the whole server while the clients keep sending, once enough
        writes were acknowledged; preferably at a moment when a write is
        committed but not yet answered, the narrowest window there is."""
        deadline = time.monotonic() + MAX_SEND_PHASE
        while self.acked < ACKED_BEFORE_KILL and time.monotonic() < deadline:
            time.sleep(0.02)
        victims = server.pids()  # listed now: once the window opens, no time to lose
        hunt_until = time.monotonic() + HUNT_SECONDS
        committed = 0
        try:
            while time.monotonic() < hunt_until and not committed:
                committed = self.committed_unanswered()
            with self.lock:
                in_flight = len(self.in_flight)
            server.kill()
        finally:
            connection.close()  # this thread's own connection: none may outlive the test
        self.stop.set()
        return {"in_flight": in_flight, "committed": committed, "victims": victims}

    def crash_round(self, server, round_no: int) -> dict:
        self.stop.clear()
        self.acked = 0
        killed: dict = {}

        def client_or_killer(i: int) -> None:
            if i == len(self.clients):
                killed.update(self.kill_when_busy(server))
            else:
                self.send_until_stopped(i, round_no)

        run_threads(client_or_killer, len(self.clients) + 1, timeout=MAX_SEND_PHASE + 60)
        killed["survivors"] = len(server.pids())
        return killed


@pytest.mark.django_db(transaction=True)
def test_kill_9_of_every_server_process_loses_and_duplicates_nothing(own_server, own_api):
    server, api = own_server, own_api
    workspace = WorkspaceFactory(slug="main")
    # Its clients post as fast as they can on purpose: no flood limit pauses their room.
    Project.objects.filter(pk=workspace.project_id).update(room_flood_limit=0)
    noters = [SessionFactory(workspace=workspace, name=f"noter-{i}") for i in range(NOTE_CLIENTS)]
    talkers = [SessionFactory(workspace=workspace, name=f"talker-{i}") for i in range(ROOM_CLIENTS)]
    bob = SessionFactory(workspace=workspace, name="bob")
    api.open_room(ROOM, [t.raw_token for t in talkers])
    run = Clients(api, [("note", s) for s in noters] + [("message", s) for s in talkers])
    ops = run.ops
    lock = threading.Lock()
    figures: Counter = Counter()
    round_lines: list[str] = []
    retry_outcomes: Counter = Counter()
    violations: Counter = Counter()

    for round_no in range(1, ROUNDS + 1):
        killed = run.crash_round(server, round_no)
        # Nothing of the old server may survive into the restart.
        violations["processes_survived_kill"] += killed["survivors"]
        violations["not_all_processes_killed"] += int(len(killed["victims"]) != 1 + server.workers)
        down = time.monotonic()
        server.start()
        downtime = time.monotonic() - down

        # Retry, with the same key and body, everything the client never heard back about.
        unanswered = [op for op in ops if op.outcome == "unanswered"]

        def retry(j: int, unanswered: list[Op] = unanswered) -> None:
            op = unanswered[j]
            status, body = run.write(op)
            with lock:
                retry_outcomes[(status, body.get("replayed"))] += 1
                if status not in (200, 201) or body.get("replayed") is not (status == 200):
                    violations["retry_not_replay_or_create"] += 1
            run.record(op, status, body)
            op.error += f" -> retried {status}"

        run_threads(retry, len(unanswered), timeout=RETRY_TIMEOUT)
        this_round = [op for op in ops if op.key.startswith(f"r{round_no}-")]
        acked = sum(op.outcome == "acked" and not op.error for op in this_round)
        errors = Counter(op.error.split(" ")[0] for op in unanswered)
        round_lines.append(
            f"round {round_no}: SIGKILL to {len(killed['victims'])} processes with "
            f"{killed['in_flight']} requests in flight ({killed['committed']} of them seen "
            f"committed), {acked} writes acknowledged before, "
            f"{len(unanswered)} unanswered {dict(errors)}, restarted in {downtime:.1f} s"
        )
        figures["acknowledged"] += acked
        figures["in flight"] += killed["in_flight"]
        figures["retried"] += len(unanswered)
        violations["nothing_acknowledged"] += int(acked == 0)

    # Every write the client ever saw acknowledged, replayed once more: the same id.
    acked_ops = [op for op in ops if op.outcome == "acked"]

    def replay(j: int) -> None:
        op = acked_ops[j]
        status, body = run.write(op)
        field = "note" if op.kind == "note" else "message"
        with lock:
            if status != 200 or body.get("replayed") is not True:
                violations["acked_write_not_replayed"] += 1
            elif body[field]["id"] != op.id:
                violations["replay_names_another_id"] += 1

    run_threads(lambda j: [replay(k) for k in range(j, len(acked_ops), 8)], 8, timeout=120)

    # The database: one row per key, the acknowledged id, nothing extra.
    notes = list(
        Note.objects.filter(sender_name__handle__startswith="noter-").values_list(
            "sender_name__handle", "idempotency_key", "public_id", "body"
        )
    )
    messages = list(
        Message.objects.filter(room__slug=ROOM).values_list(
            "author__handle", "idempotency_key", "public_id", "body"
        )
    )
    stored: dict[tuple[str, str, str], list[str]] = {}
    bodies = Counter()
    for kind, rows in (("note", notes), ("message", messages)):
        for handle, key, public_id, body in rows:
            stored.setdefault((kind, handle, key), []).append(public_id)
            bodies[(kind, body)] += 1
    attempted = {(op.kind, run.handle(op), op.key): op for op in ops}
    violations["duplicates"] = sum(len(ids) - 1 for ids in stored.values()) + sum(
        n - 1 for n in bodies.values()
    )
    violations["lost"] = sum((op.kind, run.handle(op), op.key) not in stored for op in acked_ops)
    violations["stored_under_another_id"] = sum(
        stored.get((op.kind, run.handle(op), op.key), [op.id])[0] != op.id for op in acked_ops
    )
    violations["stored_but_never_sent"] = len(set(stored) - set(attempted))
    violations["refused"] = sum(op.outcome == "refused" for op in ops)
    violations["still_unanswered"] = sum(op.outcome == "unanswered" for op in ops)

    # The room: still exactly 1..N, and it goes on from N.
    talker = talkers[0].raw_token
    head_before = Room.objects.get(slug=ROOM).head_seq
    status, after = api.send(talker, ROOM, body="after the crashes", idempotency_key="after")
    room = Room.objects.get(slug=ROOM)
    events = api.read_all(talker, ROOM)
    violations.update(seq_violations(events, room))
    violations["head_not_n"] = int(room.head_seq != len(events))
    violations["send_after_restart_not_next_seq"] = int(
        status != 201 or after["message"]["seq"] != head_before + 1 != room.head_seq
    )
    # The mailbox: bob receives every stored note, once.
    delivered = []
    for _ in range(10):
        status, body = api.check_notes(bob.raw_token)
        if status != 200 or not body["notes"]:
            break
        delivered += [note["id"] for note in body["notes"]]
    violations["bob_got_duplicates"] = len(delivered) - len(set(delivered))
    violations["bob_missed_notes"] = len({n[2] for n in notes} - set(delivered))
    violations["server_5xx"] = server.server_errors()

    report(
        "crash durability",
        {
            "rounds": ROUNDS,
            "sends acknowledged": figures["acknowledged"],
            "in flight": figures["in flight"],
            "retried": figures["retried"],
            "retry outcomes": {
                f"{s}{' replayed' if r else ''}": n for (s, r), n in retry_outcomes.items()
            },
            "acknowledged re-sent": len(acked_ops),
            "notes stored": len(notes),
            "messages stored": len(messages),
            "head_seq": room.head_seq,
            "duplicates": violations["duplicates"],
            "lost": violations["lost"],
        },
        dict(violations),
    )
    for line in round_lines:
        print(f"    {line}")
    assert nonzero(dict(violations)) == {}
