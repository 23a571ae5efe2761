"""Delivery guarantees of the mailbox under real concurrency (SPEC §3.2 to §3.5).

The concurrency tests run a live server and hit it from real threads over
HTTP, so every request has its own database connection, exactly as with
several clients of one server process. Every loop is bounded both in
iterations and in wall-clock time; a figure line is printed for each run
(``pytest -s`` shows them).

Secrets below are random at run time, with the prefix glued on, so that no
earlier run's free pages can hold the same bytes and secret scanners reading
this file see no fixture that looks like a leak.
"""

from __future__ import annotations

import logging
import secrets
import string
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.db import connection
from django.db.models import CharField, TextField
from django.utils import timezone

from mailbox.models import Conversation, Note
from mailbox.services import note_leave, session_end
from tests.conftest import client_for
from tests.factories import ProjectFactory, ProjectKeyFactory, SessionFactory, WorkspaceFactory
from tests.live import BARRIER_TIMEOUT, call, error_code, no_rate_limits

# --- 1. exactly once, named ----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_named_notes_reach_many_concurrent_pollers_exactly_once(live_server, settings):
    no_rate_limits(settings)
    workspace = WorkspaceFactory(slug="main")
    sender = SessionFactory(workspace=workspace, name="sender")
    recipient = SessionFactory(workspace=workspace, name="bob")
    notes_url = f"{live_server.url}/api/v1/notes/"
    total, senders, pollers = 60, 4, 16
    deadline = time.monotonic() + 30

    lock = threading.Lock()
    sent_ids: list[str] = []
    send_statuses: list[int] = []
    delivered: list[str] = []  # every id of every response, duplicates kept
    poll_statuses: Counter = Counter()
    all_seen = threading.Event()

    def send(worker: int) -> None:
        for i in range(worker, total, senders):
            status, body = call(
                "POST", notes_url, token=sender.raw_token, body={"body": f"note {i}", "to": "bob"}
            )
            with lock:
                send_statuses.append(status)
                if status == 201:
                    sent_ids.append(body["note"]["id"])

    def poll(worker: int) -> None:
        url = f"{notes_url}?wait=1" if worker % 2 else notes_url
        for _ in range(5000):
            if all_seen.is_set() or time.monotonic() > deadline:
                return
            status, body = call("GET", url, token=recipient.raw_token)
            with lock:
                poll_statuses[status] += 1
                if status == 200:
                    delivered.extend(note["id"] for note in body["notes"])
                if len(set(delivered)) >= total:
                    all_seen.set()
            if status != 200:
                return

    with ThreadPoolExecutor(max_workers=pollers + senders) as pool:
        futures = [pool.submit(poll, w) for w in range(pollers)]
        futures += [pool.submit(send, w) for w in range(senders)]
        for future in futures:
            future.result()
    # Nothing is left over for a later call either.
    status, leftover = call("GET", notes_url, token=recipient.raw_token)

    counts = Counter(delivered)
    duplicates = sum(n - 1 for n in counts.values())
    lost = set(sent_ids) - set(counts)
    print(
        f"\nexactly-once named: {total} notes, {pollers} pollers, "
        f"delivered {len(counts)}, duplicates {duplicates}, lost {len(lost)}, "
        f"polls {sum(poll_statuses.values())} {dict(poll_statuses)}"
    )
    assert send_statuses == [201] * total
    assert set(poll_statuses) == {200}
    assert status == 200
    assert leftover["notes"] == []
    assert duplicates == 0
    assert lost == set()
    assert set(counts) == set(sent_ids)
    notes = Note.objects.filter(recipient__handle="bob")
    assert notes.count() == total
    assert not notes.filter(delivered_at__isnull=True).exists()
    assert set(notes.values_list("delivered_to_id", flat=True)) == {recipient.pk}


# --- 2. exactly once, "next" ------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_next_notes_go_each_to_exactly_one_of_many_racing_arrivals(live_server, settings):
    no_rate_limits(settings)
    workspace = WorkspaceFactory(slug="main")
    key = ProjectKeyFactory(project=workspace.project)
    sender = SessionFactory(workspace=workspace, name="sender")
    notes_url = f"{live_server.url}/api/v1/notes/"
    total, arrivals = 30, 10

    sent_ids = []
    for i in range(total):
        status, body = call(
            "POST", notes_url, token=sender.raw_token, body={"body": f"hand-off {i}", "to": "next"}
        )
        assert status == 201, body
        assert body["delivery"] == "next"
        sent_ids.append(body["note"]["id"])

    barrier = threading.Barrier(arrivals, timeout=BARRIER_TIMEOUT)

    def arrive(i: int) -> tuple[int, str | None, list[str]]:
        barrier.wait()
        status, body = call(
            "POST",
            f"{live_server.url}/api/v1/sessions/",
            token=key.raw_key,
            body={"workspace": "main", "name": f"arrival-{i}"},
        )
        if status != 201:
            return status, None, []
        got = [note["id"] for note in body["notes"]]
        status, follow_up = call("GET", notes_url, token=body["token"])
        if status != 200:
            return status, body["session"]["id"], got
        return 201, body["session"]["id"], got + [note["id"] for note in follow_up["notes"]]

    with ThreadPoolExecutor(max_workers=arrivals) as pool:
        results = list(pool.map(arrive, range(arrivals)))
    _, for_sender = call("GET", notes_url, token=sender.raw_token)

    counts = Counter(note_id for _, _, got in results for note_id in got)
    duplicates = sum(n - 1 for n in counts.values())
    lost = set(sent_ids) - set(counts)
    to_sender = [n["id"] for n in for_sender["notes"] if n["id"] in set(sent_ids)]
    spread = sorted((len(got) for _, _, got in results), reverse=True)
    print(
        f"\nexactly-once next: {total} notes, {arrivals} arrivals, delivered {len(counts)}, "
        f"duplicates {duplicates}, lost {len(lost)}, to sender {len(to_sender)}, "
        f"per arrival {spread}"
    )
    assert [status for status, _, _ in results] == [201] * arrivals
    assert duplicates == 0
    assert lost == set()
    assert set(counts) == set(sent_ids)
    assert to_sender == []
    notes = Note.objects.filter(public_id__in=sent_ids)
    assert not notes.filter(delivered_at__isnull=True).exists()
    receivers = set(notes.values_list("delivered_to__public_id", flat=True))
    assert receivers <= {session_id for _, session_id, _ in results}
    assert sender.public_id not in receivers


# --- 3. the cap under concurrent replies -------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_concurrent_replies_never_overshoot_the_cap(live_server, settings):
    no_rate_limits(settings)
    workspace = WorkspaceFactory(slug="main", project=ProjectFactory(max_exchanges=5))
    ann = SessionFactory(workspace=workspace, name="ann")
    ben = SessionFactory(workspace=workspace, name="ben")
    notes_url = f"{live_server.url}/api/v1/notes/"
    status, opening = call(
        "POST", notes_url, token=ann.raw_token, body={"body": "shall we?", "to": "ben"}
    )
    assert status == 201, opening
    assert opening["exchanges_left"] == 4
    conversation_id = opening["conversation_id"]
    replies = 12
    barrier = threading.Barrier(replies, timeout=BARRIER_TIMEOUT)

    def reply(i: int) -> tuple[int, dict]:
        author = ann if i % 2 else ben
        barrier.wait()
        return call(
            "POST",
            notes_url,
            token=author.raw_token,
            body={"body": f"reply {i}", "conversation_id": conversation_id},
        )

    with ThreadPoolExecutor(max_workers=replies) as pool:
        results = list(pool.map(reply, range(replies)))

    statuses = Counter(status for status, _ in results)
    refusals = Counter(error_code(body) for status, body in results if status != 201)
    conversation = Conversation.objects.get(public_id=conversation_id)
    positions = sorted(conversation.notes.values_list("position", flat=True))
    print(
        f"\ncap under concurrency: cap 5, 1 sent, {replies} racing replies -> "
        f"{statuses[201]} stored, {statuses[409]} refused {dict(refusals)}, "
        f"positions {positions}"
    )
    assert statuses == {201: 4, 409: 8}
    assert refusals == {"conversation_exhausted": 8}
    left = sorted(body["exchanges_left"] for status, body in results if status == 201)
    assert left == [0, 1, 2, 3]
    assert positions == [1, 2, 3, 4, 5]
    assert conversation.notes_count == 5
    assert conversation.exchanges_left == 0


# --- 4. idempotency under concurrent retries ---------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_concurrent_retries_with_one_idempotency_key_store_one_note(live_server, settings):
    no_rate_limits(settings)
    workspace = WorkspaceFactory(slug="main")
    sender = SessionFactory(workspace=workspace, name="sender")
    SessionFactory(workspace=workspace, name="bob")
    retries = 16
    barrier = threading.Barrier(retries, timeout=BARRIER_TIMEOUT)
    payload = {"body": "build 812 is green", "to": "bob", "idempotency_key": "build-812"}

    def send(_: int) -> tuple[int, dict]:
        barrier.wait()
        return call(
            "POST", f"{live_server.url}/api/v1/notes/", token=sender.raw_token, body=payload
        )

    with ThreadPoolExecutor(max_workers=retries) as pool:
        results = list(pool.map(send, range(retries)))

    statuses = Counter(status for status, _ in results)
    note_ids = {body.get("note", {}).get("id") for _, body in results}
    replayed = Counter(body.get("replayed") for _, body in results)
    stored = Note.objects.filter(idempotency_key="build-812")
    print(
        f"\nidempotency under concurrency: {retries} racing sends -> statuses {dict(statuses)}, "
        f"replayed {dict(replayed)}, note ids {len(note_ids)}, stored {stored.count()}, "
        f"conversations {Conversation.objects.count()}"
    )
    assert statuses == {201: 1, 200: retries - 1}
    assert all(body["replayed"] is (status == 200) for status, body in results)
    assert stored.count() == 1
    assert note_ids == {stored.get().public_id}
    # A losing retry rolls back the thread it had begun: no empty conversations.
    assert Conversation.objects.count() == 1


# --- 5. the long poll wakes -----------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_long_poll_returns_as_soon_as_a_note_is_sent(live_server, settings):
    no_rate_limits(settings)
    workspace = WorkspaceFactory(slug="main")
    sender = SessionFactory(workspace=workspace, name="sender")
    poller = SessionFactory(workspace=workspace, name="bob")
    notes_url = f"{live_server.url}/api/v1/notes/"

    def wait_for_note() -> tuple[int, dict, float]:
        started = time.monotonic()
        status, body = call("GET", f"{notes_url}?wait=10", token=poller.raw_token)
        return status, body, time.monotonic() - started

    def send_later() -> tuple[int, dict]:
        time.sleep(0.5)
        return call("POST", notes_url, token=sender.raw_token, body={"body": "wake", "to": "bob"})

    with ThreadPoolExecutor(max_workers=2) as pool:
        polled = pool.submit(wait_for_note)
        sent = pool.submit(send_later)
        send_status, send_body = sent.result()
        status, body, elapsed = polled.result()

    print(
        f"\nlong-poll wake: wait=10 returned after {elapsed:.2f} s with {len(body['notes'])} note"
    )
    assert send_status == 201, send_body
    assert status == 200
    assert [note["id"] for note in body["notes"]] == [send_body["note"]["id"]]
    # Generous: it only proves the poll did not sit out its 10 s.
    assert elapsed < 5
    assert Note.objects.get(public_id=send_body["note"]["id"]).delivered_to_id == poller.pk


# --- 6. a secret goes nowhere ----------------------------------------------------------------


def random_text(alphabet: str, length: int) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(length))


@pytest.mark.django_db(transaction=True)
def test_a_secret_reaches_neither_the_database_file_nor_responses_nor_logs(caplog):
    workspace = WorkspaceFactory(slug="main")
    sender = SessionFactory(workspace=workspace, name="sender")
    recipient = SessionFactory(workspace=workspace, name="bob")
    github_token = "ghp" + "_" + random_text(string.ascii_letters + string.digits, 36)
    aws_secret = random_text(string.ascii_letters + string.digits + "/+", 40)
    body = (
        f"CI is set up. It pushes with {github_token} and deploys with\n"
        f"aws_secret_access_key = {aws_secret}\nShout if anything breaks."
    )
    leaks = [github_token, aws_secret]
    caplog.set_level(logging.DEBUG)
    for name in ("django", "django.request", "django.db.backends", "plumb", "mailbox"):
        caplog.set_level(logging.DEBUG, logger=name)
    # Log every SQL statement with its parameters too, as DEBUG=True would.
    connection.force_debug_cursor = True
    try:
        sent = client_for(sender).post("/api/v1/notes/", {"body": body, "to": "bob"})
        received = client_for(recipient).get("/api/v1/notes/")
    finally:
        connection.force_debug_cursor = False

    assert sent.status_code == 201, sent.json()
    assert {item["kind"] for item in sent.json()["scrubbed"]} == {
        "github_token",
        "aws_secret_access_key",
    }
    assert received.status_code == 200
    [delivered] = received.json()["notes"]
    assert "[REDACTED:github_token]" in delivered["body"]
    assert "[REDACTED:aws_secret_access_key]" in delivered["body"]
    assert delivered["body"].startswith("CI is set up.")
    for leak in leaks:
        assert leak not in sent.content.decode()
        assert leak not in received.content.decode()
        assert leak not in delivered["body"]

    # The logs, SQL statements and their parameters included.
    assert any(r.name == "django.db.backends" for r in caplog.records), "SQL was not logged"
    for leak in leaks:
        assert leak not in caplog.text
        for record in caplog.records:
            assert leak not in record.getMessage()
            assert leak not in repr(record.args)

    # The database: every text column of the note, and on SQLite the file's bytes.
    text_columns = [
        f.name for f in Note._meta.concrete_fields if isinstance(f, CharField | TextField)
    ]
    for leak in leaks:
        for column in text_columns:
            assert not Note.objects.filter(**{f"{column}__contains": leak}).exists(), column
    if connection.vendor == "sqlite":
        path = Path(connection.settings_dict["NAME"])
        files = [p for p in (path, Path(f"{path}-wal"), Path(f"{path}-journal")) if p.exists()]
        assert path in files
        # The committed note is still in the WAL (no checkpoint forced): read it too.
        contents = b"".join(p.read_bytes() for p in files)
        assert b"[REDACTED:github_token]" in contents
        for leak in leaks:
            assert leak.encode() not in contents
    else:
        # On PostgreSQL the column queries above are the whole check.
        assert connection.vendor == "postgresql", connection.vendor


# --- 7. query counts ------------------------------------------------------------------------


@pytest.fixture
def pair(db, settings):
    """A sender and a recipient; last_seen_at writes are off so counts are exact."""
    settings.PLUMB_SEEN_WRITE_INTERVAL = 3600
    workspace = WorkspaceFactory(slug="main")
    sender = SessionFactory(workspace=workspace, name="sender")
    recipient = SessionFactory(workspace=workspace, name="bob")
    return sender, recipient


def seed_delivered(sender, recipient, count: int) -> None:
    """``count`` notes to ``recipient``, already delivered."""
    conversation = Conversation.objects.create(cap=count, notes_count=count, last_position=count)
    now = timezone.now()
    Note.objects.bulk_create(
        Note(
            conversation=conversation,
            position=position,
            sender_name=sender.name,
            sender_session=sender,
            recipient=recipient.name,
            body=f"old news {position}",
            delivery=Note.Delivery.SESSION,
            bound_session=recipient,
            delivered_to=recipient,
            delivered_at=now,
        )
        for position in range(1, count + 1)
    )


def test_checking_with_nothing_pending_costs_the_same_whatever_was_delivered_before(
    pair, django_assert_max_num_queries
):
    sender, recipient = pair
    client = client_for(recipient)
    counts = []
    for seeded, delivered_before in ((5, 5), (295, 300)):
        seed_delivered(sender, recipient, seeded)
        assert Note.objects.filter(delivered_to=recipient).count() == delivered_before
        # Authentication (1) and the pending check (1).
        with django_assert_max_num_queries(2) as captured:
            response = client.get("/api/v1/notes/")
        assert response.status_code == 200
        assert response.json()["notes"] == []
        counts.append(len(captured))

    print(f"\nquery count, nothing pending: 5 delivered -> {counts[0]}, 300 -> {counts[1]}")
    assert counts[0] == counts[1]


def test_the_notes_piggyback_costs_no_query_when_nothing_is_pending(
    pair, django_assert_max_num_queries
):
    _, recipient = pair

    with django_assert_max_num_queries(1) as captured:
        response = client_for(recipient).get("/api/v1/sessions/current/")

    assert response.status_code == 200
    assert response.json()["notes"] == []
    (query,) = [query["sql"] for query in captured.captured_queries]
    # Authentication asks whether anything waits, in the same query.
    assert "mailbox_session" in query
    assert "mailbox_note" in query


@pytest.mark.parametrize("delivery", ["session", "name", "next"])
def test_a_pending_note_rides_on_the_very_next_call_whatever_its_addressing(pair, delivery):
    # The pending check folded into authentication must see all three ways
    # a note waits (SPEC §3.4), or the piggyback would skip a note.
    sender, recipient = pair
    workspace = recipient.workspace
    if delivery == "session":
        left = note_leave(sender, to=recipient.name.handle, body="bound to your session")
    elif delivery == "name":
        session_end(SessionFactory(workspace=workspace, name="dave"))
        left = note_leave(sender, to="dave", body="for dave, whoever runs it")
        recipient = SessionFactory(workspace=workspace, name="dave")
    else:
        left = note_leave(sender, to="next", body="for the next one")
        recipient = SessionFactory(workspace=workspace, name="newcomer")
    assert left.note.delivery == delivery

    response = client_for(recipient).get("/api/v1/sessions/current/")

    assert [note["id"] for note in response.json()["notes"]] == [left.note.public_id]


def test_checking_delivers_many_notes_in_as_many_queries_as_few(
    pair, django_assert_max_num_queries
):
    sender, recipient = pair
    client = client_for(recipient)
    counts = []
    for pending in (3, 40):
        ids = [
            note_leave(sender, body=f"news {i}", to="bob").note.public_id for i in range(pending)
        ]
        # Authentication, the candidates, the claiming UPDATE and the read-back.
        with django_assert_max_num_queries(4) as captured:
            response = client.get("/api/v1/notes/")
        assert response.status_code == 200
        assert [note["id"] for note in response.json()["notes"]] == ids
        counts.append(len(captured))

    print(f"\nquery count, pending: 3 notes -> {counts[0]}, 40 notes -> {counts[1]}")
    assert counts[0] == counts[1]
    assert not Note.objects.filter(delivered_at__isnull=True).exists()
