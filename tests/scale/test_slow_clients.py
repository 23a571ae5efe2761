"""Slow and greedy clients cannot stall a real server (issue 15, items 1-3 and 8).

The server runs as ``make serve`` runs it: gunicorn's asgi worker
(``plumb_site/asgi_worker.py``), 2 processes, Django in 8 threads each. Each
test prints one figure line (``pytest -s``, and in CI's output) and bounds
every loop by count and time. The latency bounds (an answer within 1 s) are
the issue's acceptance, and far from what the server needs (a few ms): what
they catch is a request queued behind slow clients, which waits for seconds.
"""

from __future__ import annotations

import contextlib
import json
import selectors
import socket
import statistics
import threading
import time

import pytest

from mailbox.wakeups import WAITS_PER_SESSION
from rooms import services
from rooms.models import Member
from tests.factories import SessionFactory, WorkspaceFactory
from tests.scale.harness import (
    Api,
    PlumbServer,
    call,
    connect,
    database_url,
    polls_waiting,
    read_response,
    report,
    run_threads,
)

BODY_TIMEOUT = 4  # PLUMB_BODY_TIMEOUT of this module's server
ANSWER_WITHIN = 1.0  # seconds: what /healthz and an authenticated call must meet
TRICKLERS = 200


@pytest.fixture(scope="module")
def slow_server(django_db_setup, tmp_path_factory):
    plumb = PlumbServer(
        database_url(),
        workdir=tmp_path_factory.mktemp("slow-server"),
        workers=2,
        threads=8,
        extra_env={"PLUMB_BODY_TIMEOUT": str(BODY_TIMEOUT)},
    )
    plumb.start()
    try:
        yield plumb
    finally:
        plumb.stop()


@pytest.fixture
def server(slow_server, transactional_db):
    slow_server.count_from_here()
    return slow_server


def timed(method: str, url: str, **kwargs) -> tuple[float, int, dict]:
    started = time.monotonic()
    status, body = call(method, url, timeout=30, **kwargs)
    return time.monotonic() - started, status, body


def max_and_median(seconds: list[float]) -> str:
    return f"{max(seconds) * 1000:.1f}/{statistics.median(seconds) * 1000:.1f}"


def assert_json_error(response: tuple[int, dict, bytes], status: int, code: str) -> None:
    got_status, headers, body = response
    assert got_status == status, body[:300]
    assert headers["content-type"] == "application/json", headers
    assert json.loads(body)["error"]["code"] == code


# --- 200 trickling connections ------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_200_trickling_connections_leave_health_and_authenticated_calls_answered(server):
    session = SessionFactory(workspace=WorkspaceFactory(slug="main"), name="alice")
    heads = [
        b"GET /api/v1/sessions/current/ HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ",
    ] * (TRICKLERS // 2)
    bodies = [
        b"POST /api/v1/notes/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 1000\r\n\r\n{",
    ] * (TRICKLERS // 2)
    sockets = []
    for opening in heads + bodies:
        sock = connect(server)
        sock.sendall(opening)
        sockets.append(sock)
    opened = time.monotonic()

    stop = threading.Event()

    def trickle() -> None:  # one byte a second on every connection
        while not stop.wait(1.0):
            for sock in sockets:
                with contextlib.suppress(OSError):  # answered and closed: a body timed out
                    sock.send(b"a")

    trickler = threading.Thread(target=trickle, daemon=True)
    trickler.start()
    health, authed = [], []
    try:
        for _ in range(10):  # about 3 s, well inside the body timeout
            took, status, body = timed("GET", f"{server.url}/healthz")
            assert status == 200, body
            health.append(took)
            took, status, body = timed(
                "GET", f"{server.url}/api/v1/sessions/current/", token=session.raw_token
            )
            assert status == 200, body
            authed.append(took)
            time.sleep(0.3)
        body_answers = []
        for sock in sockets[TRICKLERS // 2 :]:
            remaining = opened + BODY_TIMEOUT + 5 - time.monotonic()
            body_answers.append(read_response(sock, max(remaining, 0.5)))
        answered_after = time.monotonic() - opened
    finally:
        stop.set()
        trickler.join(5)
        for sock in sockets:
            sock.close()

    statuses = sorted({answer[0] for answer in body_answers})
    report(
        "200 trickling connections",
        {
            "healthz max/p50 ms": max_and_median(health),
            "authenticated max/p50 ms": max_and_median(authed),
            "trickled bodies answered": f"{statuses} after {answered_after:.1f} s",
        },
        {
            "slow_healthz": sum(t >= ANSWER_WITHIN for t in health),
            "slow_authenticated": sum(t >= ANSWER_WITHIN for t in authed),
            "server_5xx": server.server_errors(),
        },
    )
    assert max(health) < ANSWER_WITHIN
    assert max(authed) < ANSWER_WITHIN
    for answer in body_answers:
        assert_json_error(answer, 408, "request_timeout")
    assert server.server_errors() == 0


@pytest.mark.django_db(transaction=True)
def test_a_declared_body_past_the_limit_is_refused_before_it_is_sent(server):
    sock = connect(server)
    try:
        sock.sendall(
            b"POST /api/v1/notes/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 10000000\r\n\r\n"
        )
        started = time.monotonic()
        answer = read_response(sock, 10)
        took = time.monotonic() - started
    finally:
        sock.close()

    report("declared 10 MB body", {"answered in ms": f"{took * 1000:.1f}"}, {})
    assert_json_error(answer, 413, "request_too_large")
    assert answer[1]["connection"] == "close"


@pytest.mark.django_db(transaction=True)
def test_a_chunked_body_reaches_django_whole(server):
    workspace = WorkspaceFactory(slug="main")
    alice = SessionFactory(workspace=workspace, name="alice")
    SessionFactory(workspace=workspace, name="bob")
    body = json.dumps({"to": "bob", "body": "sent in chunks"}).encode()
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:9], body[9:]))
    sock = connect(server)
    try:
        sock.sendall(
            b"POST /api/v1/notes/ HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
            + f"Authorization: Bearer {alice.raw_token}\r\n\r\n".encode()
            + chunks
            + b"0\r\n\r\n"
        )
        status, _, answer = read_response(sock, 30)
    finally:
        sock.close()

    assert status == 201, answer
    assert json.loads(answer)["note"]["body"] == "sent in chunks"


# --- the server's own refusals ------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("request_head", "status", "code"),
    [
        (
            b"GET /healthz?" + b"q" * 5000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
            414,
            "uri_too_long",
        ),
        (
            b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"b" * 9000 + b"\r\n\r\n",
            431,
            "headers_too_large",
        ),
        (
            b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + b"".join(b"X-Pad-%d: v\r\n" % i for i in range(200))
            + b"\r\n",
            431,
            "headers_too_large",
        ),
        (b"NOT HTTP AT ALL\r\n\r\n", 400, "bad_request"),
    ],
    ids=["url-5000", "header-9000", "200-headers", "garbage"],
)
def test_what_the_server_refuses_itself_is_refused_in_the_json_shape(
    server, request_head, status, code
):
    sock = connect(server)
    try:
        sock.sendall(request_head)
        answer = read_response(sock, 10)
    finally:
        sock.close()

    assert_json_error(answer, status, code)
    assert timed("GET", f"{server.url}/healthz")[1] == 200  # and it goes on serving


# --- long-polls ---------------------------------------------------------------------------


def poll_all(api: Api, tokens: list[str], *, stagger: float) -> tuple[list, threading.Thread]:
    """Start ``check_messages?wait=30`` for each token, ``stagger`` s apart, in threads.

    Each result is (seconds from its start to its answer, status, body), filled in
    when it answers; the returned thread finishes when every poll has.
    """
    results: list = [None] * len(tokens)

    def poll(i: int) -> None:
        time.sleep(i * stagger)
        results[i] = timed("GET", f"{api.base}/notes/?wait=30", token=tokens[i])

    runner = threading.Thread(
        target=lambda: run_threads(poll, len(tokens), timeout=60), daemon=True
    )
    runner.start()
    return results, runner


def answered(results: list) -> list[int]:
    return [i for i, result in enumerate(results) if result is not None]


@pytest.mark.django_db(transaction=True)
def test_eight_polls_of_one_session_leave_four_waiting_and_the_server_free(server):
    """The four newest wait side by side (an MCP client and a hook do not cut each
    other off); a note goes to one of them; ending the session ends the others."""
    workspace = WorkspaceFactory(slug="main")
    alice = SessionFactory(workspace=workspace, name="alice")
    bob = SessionFactory(workspace=workspace, name="bob")
    api = Api(server)

    results, runner = poll_all(api, [alice.raw_token] * 8, stagger=0.3)
    health = []
    deadline = time.monotonic() + 10
    while len(answered(results)) < 4 and time.monotonic() < deadline:
        health.append(timed("GET", f"{server.url}/healthz")[0])
        time.sleep(0.1)
    time.sleep(1.0)  # the four newest polls go on waiting
    still_waiting = [i for i in range(8) if results[i] is None]
    status, body = api.leave_note(bob.raw_token, to="alice", body="for one of the newest")
    assert status == 201, body
    deadline = time.monotonic() + 10
    while len(answered(results)) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    took_it = [i for i in still_waiting if results[i] is not None]
    time.sleep(0.5)  # the three others, woken too, found nothing and wait on
    waiting_on = [i for i in still_waiting if results[i] is None]
    status, body = call("DELETE", f"{api.base}/sessions/current/", token=alice.raw_token)
    assert status == 200, body
    ended = time.monotonic()
    while any(results[i] is None for i in waiting_on) and time.monotonic() < ended + 10:
        time.sleep(0.01)
    answered_after_end = time.monotonic() - ended
    runner.join(30)

    superseded = [results[i] for i in range(8) if i not in still_waiting]
    report(
        "8 polls of one session",
        {
            "superseded": len(superseded),
            "superseded answer max ms": f"{max(r[0] for r in superseded) * 1000:.0f}",
            "healthz max ms": f"{max(health) * 1000:.1f}",
            "still waiting": still_waiting,
            "took the note": took_it,
            "the others answered after the end, ms": f"{answered_after_end * 1000:.0f}",
        },
        {"slow_healthz": sum(t >= ANSWER_WITHIN for t in health)},
    )
    assert still_waiting == [4, 5, 6, 7]
    for took, status, body in superseded:
        assert status == 200
        assert body["notes"] == []
        # Pushed out, through its wake-up in whichever process it waits, by the
        # poll started four staggers after it.
        assert took < WAITS_PER_SESSION * 0.3 + ANSWER_WITHIN
    assert len(took_it) == 1
    took, status, body = results[took_it[0]]
    assert status == 200
    assert [note["body"] for note in body["notes"]] == ["for one of the newest"]
    assert len(waiting_on) == 3
    assert answered_after_end < ANSWER_WITHIN
    for i in waiting_on:
        took, status, body = results[i]
        assert (status, body["error"]["code"]) == (401, "session_ended")
    assert max(health) < ANSWER_WITHIN


@pytest.mark.django_db(transaction=True)
def test_more_polls_than_threads_all_wait_and_each_is_woken_by_its_note(server):
    """20 sessions poll a server of 2 processes x 8 threads: none is turned away
    (they park, holding no thread), and each is woken by the note for it."""
    workspace = WorkspaceFactory(slug="main")
    sender = SessionFactory(workspace=workspace, name="sender")
    agents = [SessionFactory(workspace=workspace, name=f"agent-{i}") for i in range(20)]
    api = Api(server)

    results, runner = poll_all(api, [agent.raw_token for agent in agents], stagger=0.05)
    time.sleep(3.0)
    at_once = answered(results)
    health = [timed("GET", f"{server.url}/healthz")[0] for _ in range(5)]
    for agent in agents:
        status, body = api.leave_note(sender.raw_token, to=agent.name.handle, body="wake")
        assert status == 201, body
    runner.join(30)

    woken = [results[i] for i in range(len(agents)) if i not in at_once]
    report(
        "20 sessions polling",
        {
            "answered at once": len(at_once),
            "waited": len(woken),
            "healthz max ms": f"{max(health) * 1000:.1f}",
        },
        {"turned_away": len(at_once)},
    )
    assert at_once == []
    for _took, status, body in woken:
        assert status == 200
        assert [note["body"] for note in body["notes"]] == ["wake"]
    assert max(health) < ANSWER_WITHIN


@pytest.mark.django_db(transaction=True)
def test_a_poll_is_woken_by_a_note_whichever_process_stores_it(server):
    """Ten polls, each woken by a note sent on a fresh connection (so through either
    process); the figure is the time from the send's answer to the poll's."""
    workspace = WorkspaceFactory(slug="main")
    alice = SessionFactory(workspace=workspace, name="alice")
    bob = SessionFactory(workspace=workspace, name="bob")
    api = Api(server)
    latencies = []
    for n in range(10):
        results, runner = poll_all(api, [bob.raw_token], stagger=0)
        time.sleep(0.3)  # the poll is waiting
        status, body = api.leave_note(alice.raw_token, to="bob", body=f"note {n}")
        sent_at = time.monotonic()
        assert status == 201, body
        runner.join(30)
        _took, status, body = results[0]
        assert status == 200
        assert [note["body"] for note in body["notes"]] == [f"note {n}"]
        latencies.append(time.monotonic() - sent_at)

    report(
        "wake-up across processes",
        {
            "polls": len(latencies),
            "send answered to poll answered, max/p50 ms": max_and_median(latencies),
            "workers": len(server.workers_serving()),
        },
        {"slow_wake": sum(t >= ANSWER_WITHIN for t in latencies)},
    )
    assert max(latencies) < ANSWER_WITHIN


# --- a thousand waiting calls --------------------------------------------------------------

WAITERS = 1000


@pytest.mark.django_db(transaction=True)
def test_a_thousand_waiting_calls_hold_no_thread_and_one_message_wakes_them_all(server):
    """1,000 members of one room wait in ``read_messages`` on 2 processes of 8
    threads; the server still answers at once, and one message wakes them all."""
    workspace = WorkspaceFactory(slug="main")
    speaker = SessionFactory(workspace=workspace, name="speaker")
    room = services.room_create(speaker, slug="hall").room
    waiters = [SessionFactory(workspace=workspace, name=f"waiter-{i}") for i in range(WAITERS)]
    Member.objects.bulk_create(
        [Member(room=room, name_id=s.name_id, read_seq=room.head_seq) for s in waiters]
    )

    started = time.monotonic()
    sockets = []
    for waiter in waiters:
        sock = connect(server)
        sock.sendall(
            b"GET /api/v1/rooms/hall/messages/?wait=30 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + f"Authorization: Bearer {waiter.raw_token}\r\nConnection: close\r\n\r\n".encode()
        )
        sockets.append(sock)
    try:
        deadline = time.monotonic() + 60
        while polls_waiting(server) < WAITERS and time.monotonic() < deadline:
            time.sleep(0.2)
        all_waiting_after = time.monotonic() - started
        waiting = polls_waiting(server)
        health = [timed("GET", f"{server.url}/healthz")[0] for _ in range(5)]
        authed = [
            timed("GET", f"{server.url}/api/v1/sessions/current/", token=speaker.raw_token)[0]
            for _ in range(5)
        ]

        status, body = Api(server).send(speaker.raw_token, "hall", body="all wake")
        sent_at = time.monotonic()
        assert status == 201, body
        answers, woken_after = read_all(sockets, timeout=60)
    finally:
        for sock in sockets:
            sock.close()

    delivered = sum(
        status == 200 and [e["message"]["body"] for e in json.loads(raw)["events"]] == ["all wake"]
        for status, raw in answers
    )
    latencies = sorted(t - sent_at for t in woken_after)
    report(
        "1000 waiting calls",
        {
            "all waiting after s": f"{all_waiting_after:.1f}",
            "healthz max ms": f"{max(health) * 1000:.1f}",
            "authenticated max ms": f"{max(authed) * 1000:.1f}",
            "woken with the message": delivered,
            "wake p50/p99/max ms": "/".join(
                f"{latencies[int(q * (len(latencies) - 1))] * 1000:.0f}" for q in (0.5, 0.99, 1)
            ),
        },
        {
            "not_waiting": int(WAITERS - waiting),
            "not_woken": WAITERS - delivered,
            "server_5xx": server.server_errors(),
        },
    )
    assert waiting == WAITERS
    assert max(health) < ANSWER_WITHIN
    assert max(authed) < ANSWER_WITHIN
    assert delivered == WAITERS
    assert server.server_errors() == 0


def read_all(sockets: list[socket.socket], *, timeout: float) -> tuple[list, list[float]]:
    """Every socket's whole response (status, body) and when each was complete."""
    selector = selectors.DefaultSelector()
    buffers: dict[int, bytearray] = {}
    for sock in sockets:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
        buffers[sock.fileno()] = bytearray()
    answers, finished = [], []
    deadline = time.monotonic() + timeout
    while len(answers) < len(sockets) and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=1):
            chunk = key.fileobj.recv(65536)
            if chunk:
                buffers[key.fileobj.fileno()] += chunk
                continue
            selector.unregister(key.fileobj)
            head, _, raw = bytes(buffers[key.fileobj.fileno()]).partition(b"\r\n\r\n")
            answers.append((int(head.split()[1]), raw))
            finished.append(time.monotonic())
    selector.close()
    return answers, finished
