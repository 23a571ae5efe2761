"""Room guarantees under real concurrency (SPEC §1 Event, §4.2 send steps 2, 4 and 5).

Every test runs a live server and hits it from real threads over HTTP, so each
request has its own database connection, as with several clients of one
server process. Rooms and memberships are made through the API too. Every
loop is bounded both in iterations and in wall-clock time; a figure line is
printed for each run (``pytest -s`` shows them). Violations are counted
before anything is asserted, so the figure line shows even when a test fails.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.utils import timezone

from rooms.models import Event, Message, Room
from tests.factories import SessionFactory, WorkspaceFactory
from tests.live import BARRIER_TIMEOUT, call, error_code, no_rate_limits

TEST_DEADLINE = 90  # seconds of wall clock for the concurrent phase of one test
MAX_PAGES = 20


class RoomApi:
    """The URLs of one room on the live server."""

    def __init__(self, base: str, slug: str):
        self.base = base
        self.slug = slug
        self.room = f"{base}/api/v1/rooms/{slug}"
        self.messages = f"{self.room}/messages/"

    def join(self, session) -> tuple:
        return call("POST", f"{self.room}/join", token=session.raw_token, body={})

    def leave(self, session) -> tuple:
        return call("POST", f"{self.room}/leave", token=session.raw_token)

    def send(self, session, **fields) -> tuple:
        return call("POST", self.messages, token=session.raw_token, body=fields)

    def review(self, session, message_id: str, verdict: str) -> tuple:
        url = f"{self.messages}{message_id}/reviews/"
        return call("POST", url, token=session.raw_token, body={"verdict": verdict})

    def read_all(self, session) -> list[dict]:
        """Every event from seq 1, following ``has_more`` (bounded page count)."""
        events: list[dict] = []
        after = 0
        for _ in range(MAX_PAGES):
            status, body = call(
                "GET", f"{self.messages}?after_seq={after}&limit=500", token=session.raw_token
            )
            assert status == 200, body
            events.extend(body["events"])
            if not body["has_more"] or not body["events"]:
                return events
            after = body["events"][-1]["seq"]
        raise AssertionError(f"more than {MAX_PAGES} pages of events")


def open_room(live_server, slug: str, handles: list[str], *, joined: int | None = None):
    """Sessions for ``handles``; the first creates the room through the API and the
    next ``joined`` (default: all) join it through the API. Returns (api, sessions)."""
    workspace = WorkspaceFactory(slug="main")
    sessions = [SessionFactory(workspace=workspace, name=handle) for handle in handles]
    api = RoomApi(live_server.url, slug)
    status, body = call(
        "POST", f"{live_server.url}/api/v1/rooms/", token=sessions[0].raw_token, body={"slug": slug}
    )
    assert status == 201, body
    assert body["event"]["seq"] == 1
    count = len(handles) if joined is None else joined
    for session in sessions[1:count]:
        status, body = api.join(session)
        assert status == 201, body
    return api, sessions


def seq_violations(api_events: list[dict], room: Room) -> dict[str, int]:
    """How the room's stream breaks SPEC §1: seqs 1..head, unique, ascending, gap-free,
    the same through the API and in the database, and each message at its event's seq."""
    head = room.head_seq
    api_seqs = [event["seq"] for event in api_events]
    db_events = list(Event.objects.filter(room=room).select_related("message").order_by("seq"))
    db_seqs = [event.seq for event in db_events]
    expected = list(range(1, head + 1))
    message_seqs = sorted(Message.objects.filter(room=room).values_list("seq", flat=True))
    event_message_seqs = [e.seq for e in db_events if e.kind == Event.Kind.MESSAGE]
    misnumbered = sum(
        1
        for event in db_events
        if event.kind == Event.Kind.MESSAGE
        and (event.message_id is None or event.message.seq != event.seq)
    )
    api_misnumbered = sum(
        1
        for event in api_events
        if event["kind"] == "message" and event["message"]["seq"] != event["seq"]
    )
    return {
        "api_gaps": len(set(expected) - set(api_seqs)),
        "api_duplicates": len(api_seqs) - len(set(api_seqs)),
        "api_out_of_order": sum(a >= b for a, b in itertools.pairwise(api_seqs)),
        "api_beyond_head": sum(seq > head or seq < 1 for seq in api_seqs),
        "db_mismatch": int(db_seqs != expected),
        "api_db_mismatch": int(api_seqs != db_seqs),
        "message_seq_mismatch": int(message_seqs != event_message_seqs) + misnumbered,
        "api_message_seq_mismatch": api_misnumbered,
    }


def total(violations: dict[str, int]) -> int:
    return sum(violations.values())


def nonzero(violations: dict[str, int]) -> dict[str, int]:
    return {name: n for name, n in violations.items() if n}


# --- 1. gap-free seqs under concurrent sends -------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_concurrent_senders_get_distinct_gap_free_seqs_in_their_own_send_order(
    live_server, settings
):
    no_rate_limits(settings)
    senders, per_sender = 6, 15
    api, sessions = open_room(live_server, "seqs", [f"sender-{i}" for i in range(senders)])
    barrier = threading.Barrier(senders, timeout=BARRIER_TIMEOUT)
    deadline = time.monotonic() + TEST_DEADLINE

    def send_all(i: int) -> list[tuple[int, dict]]:
        session = sessions[i]
        barrier.wait()
        results = []
        for n in range(per_sender):
            if time.monotonic() > deadline:
                break
            results.append(api.send(session, body=f"{session.name.handle} message {n}"))
        return results

    with ThreadPoolExecutor(max_workers=senders) as pool:
        per_thread = list(pool.map(send_all, range(senders)))

    results = [result for thread in per_thread for result in thread]
    statuses = Counter(status for status, _ in results)
    sent_seqs = [body["message"]["seq"] for status, body in results if status == 201]
    sent_ids = {body["message"]["id"] for status, body in results if status == 201}
    not_increasing = 0
    for thread in per_thread:
        own = [body["message"]["seq"] for status, body in thread if status == 201]
        not_increasing += sum(a >= b for a, b in itertools.pairwise(own))
    # latest_seq counts the send's own event, so it is never below its seq.
    stale_latest = sum(
        body["latest_seq"] < body["message"]["seq"] for status, body in results if status == 201
    )
    events = api.read_all(sessions[0])
    room = Room.objects.get(slug="seqs")
    joins = sum(event["kind"] == "join" for event in events)
    violations = seq_violations(events, room)
    violations["sender_order"] = not_increasing
    violations["stale_latest_seq"] = stale_latest
    violations["lost_messages"] = len(
        sent_ids - {e["message"]["id"] for e in events if e["kind"] == "message"}
    )
    print(
        f"\nseqs: {senders} senders x {per_sender} = {len(results)} sends, "
        f"statuses {dict(statuses)}, {len(set(sent_seqs))} distinct seqs, "
        f"{len(events)} events ({joins} joins), head_seq {room.head_seq}, "
        f"violations {total(violations)} {nonzero(violations)}"
    )
    assert statuses == {201: senders * per_sender}
    assert len(set(sent_seqs)) == senders * per_sender
    assert joins == senders
    assert room.head_seq == senders * per_sender + joins
    assert [event["seq"] for event in events] == list(range(1, room.head_seq + 1))
    assert Message.objects.filter(room=room).count() == senders * per_sender
    assert nonzero(violations) == {}


# --- 2. every kind of event at once ---------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_messages_reviews_joins_and_leaves_interleaved_keep_seqs_gap_free(live_server, settings):
    no_rate_limits(settings)
    senders, per_sender, reviewers, per_reviewer, join_cycles = 4, 12, 2, 12, 8
    handles = [f"sender-{i}" for i in range(senders)]
    handles += [f"reviewer-{i}" for i in range(reviewers)]
    handles += ["watcher", "drifter"]
    # The drifter is not a member at first: it joins and leaves in a loop.
    api, sessions = open_room(live_server, "mixed", handles, joined=senders + reviewers + 1)
    sender_sessions = sessions[:senders]
    reviewer_sessions = sessions[senders : senders + reviewers]
    watcher, drifter = sessions[-2:]

    # Reviews need messages to exist before the race starts; the senders add more.
    lock = threading.Lock()
    message_ids: list[str] = []
    for n in range(2):
        status, body = api.send(sender_sessions[0], body=f"seed {n}")
        assert status == 201, body
        message_ids.append(body["message"]["id"])

    writers = senders + reviewers + 1
    barrier = threading.Barrier(writers + 1, timeout=BARRIER_TIMEOUT)
    writers_done = threading.Event()
    deadline = time.monotonic() + TEST_DEADLINE

    def send_all(session) -> list[tuple[str, int, dict]]:
        barrier.wait()
        results = []
        for n in range(per_sender):
            if time.monotonic() > deadline:
                break
            status, body = api.send(session, body=f"{session.name.handle} message {n}")
            results.append(("message", status, body))
            if status == 201:
                with lock:
                    message_ids.append(body["message"]["id"])
        return results

    def review_all(session) -> list[tuple[str, int, dict]]:
        rng = random.Random(session.name.handle)
        barrier.wait()
        results = []
        for n in range(per_reviewer):
            if time.monotonic() > deadline:
                break
            with lock:
                target = rng.choice(message_ids)
            verdict = ("approve", "request_changes", "comment")[n % 3]
            results.append(("review", *api.review(session, target, verdict)))
        return results

    def drift() -> list[tuple[str, int, dict]]:
        barrier.wait()
        results = []
        for _ in range(join_cycles):
            if time.monotonic() > deadline:
                break
            results.append(("join", *api.join(drifter)))
            results.append(("leave", *api.leave(drifter)))
        return results

    def watch() -> tuple[int, int]:
        """Read the whole stream while it grows: a reader must never see seq n+1
        without n, nor a latest_seq behind the events it was given."""
        url = f"{api.messages}?after_seq=0&limit=500&mark_read=false"
        barrier.wait()
        snapshots = broken = 0
        for _ in range(500):
            if writers_done.is_set() or time.monotonic() > deadline:
                break
            status, body = call("GET", url, token=watcher.raw_token)
            snapshots += 1
            seqs = [event["seq"] for event in body.get("events", [])]
            if (
                status != 200
                or seqs != list(range(1, len(seqs) + 1))
                or (seqs and body["latest_seq"] < seqs[-1])
            ):
                broken += 1
        return snapshots, broken

    with ThreadPoolExecutor(max_workers=writers + 1) as pool:
        watching = pool.submit(watch)
        futures = [pool.submit(send_all, s) for s in sender_sessions]
        futures += [pool.submit(review_all, s) for s in reviewer_sessions]
        futures.append(pool.submit(drift))
        try:
            results = [result for future in futures for result in future.result()]
        finally:
            writers_done.set()
        snapshots, broken_snapshots = watching.result()

    outcomes = Counter((kind, status) for kind, status, _ in results)
    events = api.read_all(sender_sessions[0])
    room = Room.objects.get(slug="mixed")
    kinds = Counter(event["kind"] for event in events)
    violations = seq_violations(events, room)
    # Each response's event is in the stream under the seq the response gave.
    by_seq = {event["seq"]: event for event in events}
    violations["response_seq_mismatch"] = sum(
        (
            by_seq.get(body["message"]["seq"], {}).get("kind") != "message"
            if kind == "message"
            else by_seq.get(body["event"]["seq"], {}).get("kind") != kind
        )
        for kind, status, body in results
        if status in (200, 201)
    )
    # A review comes after the message it reviews.
    message_seq_by_id = {e["message"]["id"]: e["seq"] for e in events if e["kind"] == "message"}
    violations["review_before_message"] = sum(
        message_seq_by_id.get(e["review"]["message_id"], e["seq"]) >= e["seq"]
        for e in events
        if e["kind"] == "review"
    )
    violations["reader_saw_gap"] = broken_snapshots
    print(
        f"\nmixed kinds: {senders} senders x {per_sender} messages, {reviewers} reviewers x "
        f"{per_reviewer} reviews, {join_cycles} join/leave cycles -> "
        f"{len(results)} calls {dict(sorted(outcomes.items()))}, events {len(events)} "
        f"{dict(kinds)}, head_seq {room.head_seq}, {snapshots} concurrent reads, "
        f"violations {total(violations)} {nonzero(violations)}"
    )
    assert outcomes == {
        ("message", 201): senders * per_sender,
        ("review", 201): reviewers * per_reviewer,
        ("join", 201): join_cycles,
        ("leave", 200): join_cycles,
    }
    assert kinds == {
        "join": senders + reviewers + 1 + join_cycles,
        "leave": join_cycles,
        "message": 2 + senders * per_sender,
        "review": reviewers * per_reviewer,
    }
    assert room.head_seq == sum(kinds.values())
    assert [event["seq"] for event in events] == list(range(1, room.head_seq + 1))
    assert nonzero(violations) == {}


# --- 3. idempotency under concurrent retries ----------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_concurrent_retries_with_one_idempotency_key_store_one_message(live_server, settings):
    no_rate_limits(settings)
    api, sessions = open_room(live_server, "retries", ["sender", "bob"])
    sender = sessions[0]
    head_before = Room.objects.get(slug="retries").head_seq
    retries = 16
    barrier = threading.Barrier(retries, timeout=BARRIER_TIMEOUT)
    payload = {"body": "deploy 812 is out", "idempotency_key": "deploy-812"}

    def send(_: int) -> tuple[int, dict]:
        barrier.wait()
        return api.send(sender, **payload)

    with ThreadPoolExecutor(max_workers=retries) as pool:
        results = list(pool.map(send, range(retries)))

    statuses = Counter(status for status, _ in results)
    replayed = Counter(body.get("replayed") for _, body in results)
    ids = {body.get("message", {}).get("id") for _, body in results}
    seqs = {body.get("message", {}).get("seq") for _, body in results}
    room = Room.objects.get(slug="retries")
    stored = Message.objects.filter(room=room, idempotency_key="deploy-812")
    events = api.read_all(sender)
    violations = seq_violations(events, room)
    violations["replayed_flag_wrong"] = sum(
        body.get("replayed") is not (status == 200) for status, body in results
    )
    print(
        f"\nidempotency: {retries} racing retries -> statuses {dict(statuses)}, "
        f"replayed {dict(replayed)}, message ids {len(ids)}, seqs {sorted(seqs, key=str)}, "
        f"stored {stored.count()}, head {head_before} -> {room.head_seq}, "
        f"violations {total(violations)} {nonzero(violations)}"
    )
    assert statuses == {201: 1, 200: retries - 1}
    assert replayed == {False: 1, True: retries - 1}
    assert stored.count() == 1
    assert Message.objects.filter(room=room).count() == 1
    message = stored.get()
    assert ids == {message.public_id}
    assert seqs == {message.seq}
    assert room.head_seq == head_before + 1 == message.seq
    assert nonzero(violations) == {}


# --- 4. require_read: check and insert are one step --------------------------------------


@pytest.mark.django_db(transaction=True)
def test_only_one_of_racing_require_read_sends_from_the_same_point_is_posted(live_server, settings):
    no_rate_limits(settings)
    members, rounds = 6, 5
    api, sessions = open_room(live_server, "race", [f"member-{i}" for i in range(members)])
    barrier = threading.Barrier(members, timeout=BARRIER_TIMEOUT)
    deadline = time.monotonic() + TEST_DEADLINE
    figures = []
    round_violations = 0
    failures: list[str] = []

    for round_no in range(1, rounds + 1):
        assert time.monotonic() < deadline, "out of time"
        # Everyone reads up to the head first, so all share one reference point S.
        read_to = set()
        for session in sessions:
            status, body = call("GET", f"{api.messages}?limit=500", token=session.raw_token)
            assert status == 200, body
            read_to.add(body["read_seq"])
        head = Room.objects.get(slug="race").head_seq
        assert read_to == {head}, read_to
        reference = head

        def race(i: int, round_no: int = round_no, reference: int = reference) -> tuple:
            barrier.wait()
            return api.send(
                sessions[i],
                body=f"round {round_no}: member-{i} says the build is mine",
                after_seq=reference,
                require_read=True,
            )

        with ThreadPoolExecutor(max_workers=members) as pool:
            results = list(pool.map(race, range(members)))

        statuses = Counter(status for status, _ in results)
        codes = Counter(error_code(body) for status, body in results if status != 201)
        winners = [body for status, body in results if status == 201]
        stored = list(Message.objects.filter(room__slug="race", seq__gt=reference))
        head_after = Room.objects.get(slug="race").head_seq
        problems = []
        if len(winners) != 1 or len(stored) != 1 or head_after != reference + 1:
            problems.append("not exactly one posted")
        if winners:
            winner = winners[0]["message"]
            for status, body in results:
                if status == 201:
                    continue
                details = body.get("error", {}).get("details", {})
                unseen = details.get("unseen", [])
                if (
                    [(e["seq"], e["kind"]) for e in unseen] != [(winner["seq"], "message")]
                    or unseen[0]["message"]["id"] != winner["id"]
                    or details.get("unseen_count") != 1
                    or details.get("latest_seq") != reference + 1
                ):
                    problems.append(f"loser details {details}")
        if statuses != {201: 1, 409: members - 1} or codes != {"unread_messages": members - 1}:
            problems.append(f"statuses {dict(statuses)} codes {dict(codes)}")
        round_violations += len(problems)
        failures += [f"round {round_no}: {p}" for p in problems]
        winner_name = winners[0]["message"]["author"]["handle"] if len(winners) == 1 else "-"
        figures.append(
            f"r{round_no} S={reference} 201x{statuses[201]} 409x{statuses[409]} "
            f"winner {winner_name} stored {len(stored)}"
        )

    room = Room.objects.get(slug="race")
    events = api.read_all(sessions[0])
    violations = seq_violations(events, room)
    print(
        f"\nrequire_read race: {rounds} rounds x {members} members -> {'; '.join(figures)}; "
        f"round violations {round_violations}, seq violations {total(violations)}"
    )
    assert failures == []
    assert Message.objects.filter(room=room).count() == rounds
    assert room.head_seq == members + rounds
    assert nonzero(violations) == {}


# --- 5. a refused send does not use up its key -------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_sends_refused_in_a_locked_room_leave_their_idempotency_key_unused(live_server, settings):
    no_rate_limits(settings)
    api, sessions = open_room(live_server, "locked", ["sender", "bob"])
    sender = sessions[0]
    Room.objects.filter(slug="locked").update(locked_at=timezone.now())
    head_before = Room.objects.get(slug="locked").head_seq
    attempts = 8
    barrier = threading.Barrier(attempts, timeout=BARRIER_TIMEOUT)
    payload = {"body": "release notes are up", "idempotency_key": "notes-1"}

    def send(_: int) -> tuple[int, dict]:
        barrier.wait()
        return api.send(sender, **payload)

    with ThreadPoolExecutor(max_workers=attempts) as pool:
        refused = list(pool.map(send, range(attempts)))

    refused_statuses = Counter(status for status, _ in refused)
    refused_codes = Counter(error_code(body) for _, body in refused)
    stored_while_locked = Message.objects.filter(room__slug="locked").count()
    head_locked = Room.objects.get(slug="locked").head_seq

    Room.objects.filter(slug="locked").update(locked_at=None)
    status, body = api.send(sender, **payload)
    retry_status, retry_body = api.send(sender, **payload)
    room = Room.objects.get(slug="locked")
    stored = Message.objects.filter(room=room, idempotency_key="notes-1")
    print(
        f"\nrefused key stays unused: {attempts} racing sends while locked -> "
        f"{dict(refused_statuses)} {dict(refused_codes)}, stored {stored_while_locked}; "
        f"after unlock {status} (replayed {body.get('replayed')}), retry {retry_status} "
        f"(replayed {retry_body.get('replayed')}), stored {stored.count()}, "
        f"head {head_before} -> {head_locked} -> {room.head_seq}"
    )
    assert refused_statuses == {423: attempts}
    assert refused_codes == {"room_locked": attempts}
    assert stored_while_locked == 0
    assert head_locked == head_before
    assert status == 201, body
    assert body["replayed"] is False
    assert retry_status == 200, retry_body
    assert retry_body["replayed"] is True
    assert retry_body["message"]["id"] == body["message"]["id"]
    assert stored.count() == 1
    assert stored.get().public_id == body["message"]["id"]
    assert room.head_seq == head_before + 1 == body["message"]["seq"]
