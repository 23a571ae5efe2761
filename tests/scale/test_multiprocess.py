"""SPEC §3.4 and §4.2 with several server processes on one database (issue 6, item 2).

The tests drive plumb under gunicorn with 4 worker processes of 4 threads
(the ``server`` fixture: one server for the module, on the test database,
SQLite or PostgreSQL) from a pool of client threads over loopback, one
connection per request, so that the requests of one test spread over every
process; each test checks from the access log that more than one did serve.
Every loop is bounded in iterations and in wall-clock time. Each test prints
one figure line (``pytest -s``): the operations done and the violations
found, counted before anything is asserted.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from mailbox.models import Conversation, Note, Project
from rooms.models import Message, Room
from tests.factories import ProjectFactory, ProjectKeyFactory, SessionFactory, WorkspaceFactory
from tests.scale.harness import (
    BARRIER_TIMEOUT,
    error_code,
    nonzero,
    report,
    run_threads,
    seq_violations,
    workers_figure,
)

TEST_DEADLINE = 60  # seconds for the concurrent phase of one test


def process_violations(server) -> dict[str, int]:
    """What every test also checks: no 5xx anywhere, and more than one process served."""
    return {
        "server_5xx": server.server_errors(),
        "single_process": int(len(server.workers_serving()) < 2),
    }


# --- exactly-once delivery, named ---------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_notes_to_one_session_reach_16_pollers_on_4_processes_exactly_once(server, api):
    workspace = WorkspaceFactory(slug="main")
    senders = [SessionFactory(workspace=workspace, name=f"sender-{i}") for i in range(4)]
    bob = SessionFactory(workspace=workspace, name="bob")
    per_sender, pollers = 50, 16
    total = per_sender * len(senders)
    deadline = time.monotonic() + TEST_DEADLINE

    lock = threading.Lock()
    sent: set[str] = set()
    send_statuses: Counter = Counter()
    delivered: list[str] = []  # every id in every response, duplicates kept
    poll_statuses: Counter = Counter()
    senders_done = threading.Event()
    all_seen = threading.Event()

    def send(i: int) -> None:
        for n in range(per_sender):
            if time.monotonic() > deadline:
                return
            status, body = api.leave_note(
                senders[i].raw_token, body=f"sender-{i} note {n}", to="bob"
            )
            with lock:
                send_statuses[status] += 1
                if status == 201:
                    sent.add(body["note"]["id"])

    def poll(i: int) -> None:
        # Half long-poll: their wake-up for a note stored by another process is
        # the periodic re-check, not the in-process condition variable.
        wait = 1 if i % 2 else None
        for _ in range(5000):
            if all_seen.is_set() or time.monotonic() > deadline:
                return
            status, body = api.check_notes(bob.raw_token, wait=wait)
            with lock:
                poll_statuses[status] += 1
                if status == 200:
                    delivered.extend(note["id"] for note in body["notes"])
                if senders_done.is_set() and sent <= set(delivered):
                    all_seen.set()
            if status != 200:
                return
            if wait is None:
                # A short pause keeps 8 busy pollers from starving the senders
                # of CPU; with 16 of them, every note still has several racing
                # claimers.
                time.sleep(0.05)

    finished = Counter()

    def client(i: int) -> None:
        if i >= len(senders):
            poll(i - len(senders))
            return
        try:
            send(i)
        finally:
            with lock:
                finished["senders"] += 1
                if finished["senders"] == len(senders):
                    senders_done.set()

    run_threads(client, len(senders) + pollers, timeout=TEST_DEADLINE + 90)
    senders_done.set()
    leftover_status, leftover = api.check_notes(bob.raw_token)

    counts = Counter(delivered)
    stored = Note.objects.filter(recipient__handle="bob")
    violations = {
        "send_refused": total - send_statuses[201],
        "poll_failed": sum(n for status, n in poll_statuses.items() if status != 200),
        "duplicates": sum(n - 1 for n in counts.values()),
        "lost": len(set(sent) - set(counts)),
        "unknown_delivered": len(set(counts) - set(sent)),
        "left_over": len(leftover.get("notes", [])) + int(leftover_status != 200),
        "db_undelivered": stored.filter(delivered_at__isnull=True).count(),
        "db_wrong_receiver": stored.exclude(delivered_to=bob).count(),
        "db_count": abs(stored.count() - total),
    } | process_violations(server)
    report(
        "exactly-once named",
        {
            "notes": total,
            "senders": len(senders),
            "pollers": pollers,
            "polls": sum(poll_statuses.values()),
            "delivered": len(counts),
            "workers": workers_figure(server),
        },
        violations,
    )
    assert nonzero(violations) == {}


# --- exactly-once delivery, "next", with sessions attaching meanwhile ---------------------


@pytest.mark.django_db(transaction=True)
def test_next_notes_go_each_to_one_session_attaching_while_they_are_sent(server, api):
    workspace = WorkspaceFactory(slug="main")
    key = ProjectKeyFactory(project=workspace.project)
    senders = [SessionFactory(workspace=workspace, name=f"sender-{i}") for i in range(2)]
    sender_ids = {s.public_id for s in senders}
    before, during, arrivals = 10, 30, 12
    total = before + during
    deadline = time.monotonic() + TEST_DEADLINE

    # note id -> monotonic time its send began (a session that finished attaching
    # before that moment must not get it: the note was sent after it attached).
    sent_at: dict[str, float] = {}
    send_statuses: Counter = Counter()
    to_senders: list[str] = []  # notes that rode on a sender's own responses
    lock = threading.Lock()

    def send(sender, n: int) -> None:
        began = time.monotonic()
        status, body = api.leave_note(sender.raw_token, body=f"hand-off {n}", to="next")
        with lock:
            send_statuses[status] += 1
            if status == 201 and body.get("delivery") == "next":
                sent_at[body["note"]["id"]] = began
            to_senders.extend(note["id"] for note in body.get("notes", []))

    for n in range(before):
        send(senders[n % 2], n)

    # Sessions attach in waves of 4 at once, each wave after another part of
    # the notes was acknowledged, so that attaching and sending interleave.
    wave, waves = 4, arrivals // 4
    barriers = [threading.Barrier(wave, timeout=BARRIER_TIMEOUT) for _ in range(waves)]
    senders_done = threading.Event()

    def client(i: int) -> dict:
        if i < len(senders):
            for n in range(before + i, total, len(senders)):
                if time.monotonic() > deadline:
                    break
                send(senders[i], n)
            return {}
        number = i - len(senders)
        threshold = before + (number // wave) * during // waves
        for _ in range(int(TEST_DEADLINE / 0.01)):
            if len(sent_at) >= threshold or senders_done.is_set():
                break
            time.sleep(0.01)
        barriers[number // wave].wait()
        status, body = api.start_session(key.raw_key, "main", f"arrival-{number}")
        attached = time.monotonic()
        if status != 201:
            return {"status": status}
        got = [note["id"] for note in body["notes"]]
        # Notes sent after it attached are not for it; a second call must not
        # hand them out either.
        poll_status, follow_up = api.check_notes(body["token"])
        got += [note["id"] for note in follow_up.get("notes", [])]
        return {
            "status": status,
            "poll_status": poll_status,
            "id": body["session"]["id"],
            "attached": attached,
            "got": got,
        }

    finished = Counter()

    def guarded(i: int) -> dict:
        try:
            return client(i)
        finally:
            if i < len(senders):
                with lock:
                    finished["senders"] += 1
                    if finished["senders"] == len(senders):
                        senders_done.set()

    results = [r for r in run_threads(guarded, len(senders) + arrivals, timeout=120) if r]
    # Whatever was sent after the last arrival goes to the next one to attach.
    status, sweeper = api.start_session(key.raw_key, "main", "sweeper")
    assert status == 201, sweeper
    results.append(
        {
            "status": 201,
            "poll_status": 200,
            "id": sweeper["session"]["id"],
            "attached": time.monotonic(),
            "got": [note["id"] for note in sweeper["notes"]],
        }
    )
    for sender in senders:
        status, body = api.check_notes(sender.raw_token)
        to_senders += [n["id"] for n in body.get("notes", [])]

    counts = Counter(note_id for r in results for note_id in r.get("got", []))
    early = sum(
        1
        for r in results
        for note_id in r.get("got", [])
        if note_id in sent_at and sent_at[note_id] > r["attached"]
    )
    stored = Note.objects.filter(public_id__in=list(sent_at))
    receivers = set(stored.values_list("delivered_to__public_id", flat=True))
    spread = sorted((len(r.get("got", [])) for r in results), reverse=True)
    violations = {
        "send_refused": total - send_statuses[201],
        "start_refused": sum(r["status"] != 201 for r in results),
        "poll_failed": sum(r.get("poll_status") != 200 for r in results),
        "duplicates": sum(n - 1 for n in counts.values()),
        "lost": len(set(sent_at) - set(counts)),
        "to_sender": len(to_senders) + len(receivers & sender_ids),
        "sent_after_attaching": early,
        "db_undelivered": stored.filter(delivered_at__isnull=True).count(),
        "db_wrong_receiver": len(receivers - {r.get("id") for r in results}),
    } | process_violations(server)
    report(
        "exactly-once next",
        {
            "notes": total,
            "sent before": before,
            "sent while attaching": during,
            "sessions attaching": arrivals,
            "delivered": len(counts),
            "per session": spread,
            "workers": workers_figure(server),
        },
        violations,
    )
    assert nonzero(violations) == {}


# --- gap-free seqs -----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_504_sends_from_8_clients_get_seqs_exactly_1_to_n(server, api):
    workspace = WorkspaceFactory(slug="main")
    # Its clients post as fast as they can on purpose: no flood limit pauses their room.
    Project.objects.filter(pk=workspace.project_id).update(room_flood_limit=0)
    clients, per_client = 8, 63
    sessions = [SessionFactory(workspace=workspace, name=f"sender-{i}") for i in range(clients)]
    watcher = SessionFactory(workspace=workspace, name="watcher")
    api.open_room("seqs", [s.raw_token for s in [*sessions, watcher]])
    barrier = threading.Barrier(clients + 1, timeout=BARRIER_TIMEOUT)
    deadline = time.monotonic() + TEST_DEADLINE
    writers_done = threading.Event()

    def send_all(i: int) -> list[tuple[int, dict]]:
        barrier.wait()
        results = []
        for n in range(per_client):
            if time.monotonic() > deadline:
                break
            results.append(api.send(sessions[i].raw_token, "seqs", body=f"sender-{i} says {n}"))
        return results

    def watch() -> tuple[int, int]:
        """Read the whole stream while it grows: never seq n+1 without n."""
        barrier.wait()
        snapshots = broken = 0
        for _ in range(1000):
            if writers_done.is_set() or time.monotonic() > deadline:
                break
            status, body = api.read(watcher.raw_token, "seqs", after_seq=0)
            snapshots += 1
            seqs = [event["seq"] for event in body.get("events", [])]
            if status != 200 or seqs != list(range(1, len(seqs) + 1)):
                broken += 1
            time.sleep(0.2)
        return snapshots, broken

    per_thread: list = [None] * clients
    watched: list = [(0, 0)]

    finished = Counter()
    lock = threading.Lock()

    def client(i: int) -> None:
        if i == clients:
            watched[0] = watch()
            return
        try:
            per_thread[i] = send_all(i)
        finally:
            with lock:
                finished["writers"] += 1
                if finished["writers"] == clients:
                    writers_done.set()

    run_threads(client, clients + 1, timeout=150)
    snapshots, broken_snapshots = watched[0]

    results = [result for thread in per_thread for result in thread]
    statuses = Counter(status for status, _ in results)
    ok = [body for status, body in results if status == 201]
    own_order = sum(
        a >= b
        for thread in per_thread
        for a, b in zip(
            [body["message"]["seq"] for status, body in thread if status == 201],
            [body["message"]["seq"] for status, body in thread if status == 201][1:],
            strict=False,
        )
    )
    events = api.read_all(sessions[0].raw_token, "seqs")
    room = Room.objects.get(slug="seqs")
    by_seq = {event["seq"]: event for event in events}
    violations = (
        seq_violations(events, room)
        | {
            "send_refused": clients * per_client - statuses[201],
            "sender_order": own_order,
            "response_seq_mismatch": sum(
                by_seq.get(body["message"]["seq"], {}).get("message", {}).get("id")
                != body["message"]["id"]
                for body in ok
            ),
            "latest_below_own_seq": sum(body["latest_seq"] < body["message"]["seq"] for body in ok),
            "head_not_n": int(room.head_seq != len(events)),
            "messages_not_sent": abs(Message.objects.filter(room=room).count() - len(ok)),
            "reader_saw_gap": broken_snapshots,
        }
        | process_violations(server)
    )
    report(
        "gap-free seqs",
        {
            "sends": len(results),
            "clients": clients,
            "events": len(events),
            "head_seq": room.head_seq,
            "concurrent reads": snapshots,
            "workers": workers_figure(server),
        },
        violations,
    )
    assert nonzero(violations) == {}
    assert [event["seq"] for event in events] == list(range(1, room.head_seq + 1))


# --- idempotency under concurrent retries --------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_16_concurrent_retries_of_a_key_store_one_message_or_note(server, api):
    workspace = WorkspaceFactory(slug="main")
    sender = SessionFactory(workspace=workspace, name="sender")
    bob = SessionFactory(workspace=workspace, name="bob")
    api.open_room("retries", [sender.raw_token, bob.raw_token])
    head_before = Room.objects.get(slug="retries").head_seq
    retries = 16
    keys = [("room", f"deploy-{n}") for n in range(3)] + [("note", f"build-{n}") for n in range(3)]
    barrier = threading.Barrier(retries, timeout=BARRIER_TIMEOUT)
    figures: list[str] = []
    violations: Counter = Counter()

    for kind, key in keys:
        payload = {"body": f"{key} is done", "idempotency_key": key}

        def retry(_: int, kind: str = kind, payload: dict = payload) -> tuple[int, dict]:
            barrier.wait()
            if kind == "room":
                return api.send(sender.raw_token, "retries", **payload)
            return api.leave_note(sender.raw_token, to="bob", **payload)

        results = run_threads(retry, retries, timeout=120)
        statuses = Counter(status for status, _ in results)
        field = "message" if kind == "room" else "note"
        ids = {body.get(field, {}).get("id") for _, body in results}
        if kind == "room":
            stored = list(Message.objects.filter(idempotency_key=key).values_list("public_id"))
        else:
            stored = list(Note.objects.filter(idempotency_key=key).values_list("public_id"))
        violations["not_one_201"] += int(statuses != {201: 1, 200: retries - 1})
        violations["replayed_flag_wrong"] += sum(
            body.get("replayed") is not (status == 200) for status, body in results
        )
        violations["answers_name_other_ids"] += len(ids) - 1
        violations["stored_not_one"] += abs(len(stored) - 1)
        violations["answer_not_stored"] += int(stored != [(next(iter(ids)),)])
        figures.append(f"{key} {dict(statuses)}")

    room = Room.objects.get(slug="retries")
    events = api.read_all(sender.raw_token, "retries")
    violations.update(seq_violations(events, room))
    violations["head_moved_wrong"] = int(room.head_seq != head_before + 3)
    # A losing note retry rolls back the thread it had begun: no empty conversations.
    violations["orphan_conversations"] = Conversation.objects.filter(notes_count=0).count()
    violations["conversations_not_3"] = abs(Conversation.objects.count() - 3)
    violations.update(process_violations(server))
    report(
        "idempotency under concurrent retries",
        {
            "keys": len(keys),
            "retries per key": retries,
            "requests": len(keys) * retries,
            "outcomes": "; ".join(figures),
            "workers": workers_figure(server),
        },
        dict(violations),
    )
    assert nonzero(dict(violations)) == {}


# --- caps under concurrent replies ---------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_12_concurrent_replies_with_4_left_store_exactly_4(server, api):
    workspace = WorkspaceFactory(slug="main", project=ProjectFactory(max_exchanges=5))
    ann = SessionFactory(workspace=workspace, name="ann")
    ben = SessionFactory(workspace=workspace, name="ben")
    rounds, replies = 3, 12
    barrier = threading.Barrier(replies, timeout=BARRIER_TIMEOUT)
    figures: list[str] = []
    violations: Counter = Counter()

    for round_no in range(rounds):
        status, opening = api.leave_note(ann.raw_token, body=f"thread {round_no}", to="ben")
        assert status == 201, opening
        assert opening["exchanges_left"] == 4
        conversation_id = opening["conversation_id"]

        def reply(i: int, conversation_id: str = conversation_id) -> tuple[int, dict]:
            author = ann if i % 2 else ben
            barrier.wait()
            return api.leave_note(
                author.raw_token, body=f"reply {i}", conversation_id=conversation_id
            )

        results = run_threads(reply, replies, timeout=120)
        statuses = Counter(status for status, _ in results)
        codes = Counter(error_code(body) for status, body in results if status != 201)
        left = sorted(body["exchanges_left"] for status, body in results if status == 201)
        conversation = Conversation.objects.get(public_id=conversation_id)
        positions = sorted(conversation.notes.values_list("position", flat=True))
        violations["not_4_stored"] += int(statuses != {201: 4, 409: 8})
        violations["wrong_refusal"] += int(codes != {"conversation_exhausted": 8})
        violations["exchanges_left_wrong"] += int(left != [0, 1, 2, 3])
        violations["positions_not_1_to_5"] += int(positions != [1, 2, 3, 4, 5])
        violations["count_not_cap"] += int(
            conversation.notes_count != 5 or conversation.exchanges_left != 0
        )
        figures.append(f"{statuses[201]} stored {statuses[409]} refused")

    violations.update(process_violations(server))
    report(
        "cap under concurrent replies",
        {
            "threads": rounds,
            "cap": 5,
            "racing replies each": replies,
            "outcomes": "; ".join(figures),
            "workers": workers_figure(server),
        },
        dict(violations),
    )
    assert nonzero(dict(violations)) == {}


# --- require_read races ----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_one_of_6_require_read_sends_from_the_same_point_wins_each_round(server, api):
    workspace = WorkspaceFactory(slug="main")
    members, rounds = 6, 5
    sessions = [SessionFactory(workspace=workspace, name=f"member-{i}") for i in range(members)]
    api.open_room("race", [s.raw_token for s in sessions])
    barrier = threading.Barrier(members, timeout=BARRIER_TIMEOUT)
    figures: list[str] = []
    violations: Counter = Counter()

    for round_no in range(1, rounds + 1):
        # Everyone reads to the head first, so all share one reference point.
        for session in sessions:
            status, body = api.read(session.raw_token, "race", after_seq=0)
            assert status == 200, body
        reference = Room.objects.get(slug="race").head_seq

        def race(i: int, round_no: int = round_no, reference: int = reference) -> tuple:
            barrier.wait()
            return api.send(
                sessions[i].raw_token,
                "race",
                body=f"round {round_no}: member-{i} takes the build",
                after_seq=reference,
                require_read=True,
            )

        results = run_threads(race, members, timeout=120)
        statuses = Counter(status for status, _ in results)
        codes = Counter(error_code(body) for status, body in results if status != 201)
        winners = [body["message"] for status, body in results if status == 201]
        stored = Message.objects.filter(room__slug="race", seq__gt=reference).count()
        head_after = Room.objects.get(slug="race").head_seq
        violations["not_exactly_one_posted"] += int(
            len(winners) != 1 or stored != 1 or head_after != reference + 1
        )
        violations["losers_not_409_unread"] += int(
            statuses.get(409, 0) != members - 1 or codes != {"unread_messages": members - 1}
        )
        if len(winners) == 1:
            for status, body in results:
                details = body.get("error", {}).get("details", {})
                unseen = details.get("unseen", [])
                violations["loser_details_wrong"] += int(
                    status != 201
                    and (
                        [(e["seq"], e["kind"]) for e in unseen] != [(winners[0]["seq"], "message")]
                        or details.get("unseen_count") != 1
                        or details.get("latest_seq") != reference + 1
                    )
                )
        figures.append(f"r{round_no} 201x{statuses[201]} 409x{statuses[409]}")

    room = Room.objects.get(slug="race")
    events = api.read_all(sessions[0].raw_token, "race")
    violations.update(seq_violations(events, room))
    violations["messages_not_rounds"] = abs(Message.objects.filter(room=room).count() - rounds)
    violations.update(process_violations(server))
    report(
        "require_read race",
        {
            "rounds": rounds,
            "members": members,
            "outcomes": "; ".join(figures),
            "head_seq": room.head_seq,
            "workers": workers_figure(server),
        },
        dict(violations),
    )
    assert nonzero(dict(violations)) == {}
