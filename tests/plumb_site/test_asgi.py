"""The server's front (plumb_site/asgi.py): a body is read whole, promptly and within
its limit, before any thread or gate seat is spent on it (issue 15, item 1).

Driven in-process with ASGI messages, so each client behaviour (a huge declared
length, a trickle, a disconnect) is exact rather than timed over a socket;
tests/scale/test_slow_clients.py does the same against a real server.
"""

from __future__ import annotations

import asyncio
import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client import REGISTRY

import plumb_site.asgi as front
from common import gate as gate_module
from common import inturn, wake
from common.gate import RequestGate
from mailbox.services import note_leave
from tests.conftest import threads_close_their_connections
from tests.factories import SessionFactory, WorkspaceFactory
from tests.waits import fill_but_one


def scope(method: str = "GET", path: str = "/healthz", headers=()) -> dict:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(k.encode(), v.encode()) for k, v in headers],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
    }


async def stays() -> None:
    """A client that keeps its connection open (until the front stops listening)."""
    await asyncio.Event().wait()


async def leaves() -> None:
    """A client that closes its connection once its chunks are out."""


class Client:
    """The client side of one ASGI request: what it sends, and what it got back."""

    def __init__(self, chunks=(), *, then=stays) -> None:
        self.chunks = list(chunks)
        self.then = then  # awaited once the chunks are out; then the client leaves
        self.reads = 0
        self.sent: list[dict] = []
        self.left = threading.Event()  # its leaving has reached the front

    async def receive(self) -> dict:
        self.reads += 1
        if self.chunks:
            body, more = self.chunks.pop(0)
            return {"type": "http.request", "body": body, "more_body": more}
        await self.then()
        self.left.set()
        return {"type": "http.disconnect"}

    async def send(self, message: dict) -> None:
        self.sent.append(message)

    @property
    def status(self) -> int | None:
        starts = [m for m in self.sent if m["type"] == "http.response.start"]
        return starts[0]["status"] if starts else None

    @property
    def headers(self) -> dict[bytes, bytes]:
        return dict(self.sent[0]["headers"])

    def json(self) -> dict:
        body = b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")
        return json.loads(body)


def run(client: Client, request_scope: dict) -> Client:
    asyncio.run(front.application(request_scope, client.receive, client.send))
    return client


def test_a_declared_length_past_the_limit_is_refused_before_a_byte_is_read(settings):
    client = Client([(b"x" * 100, True)])
    declared = settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1

    run(client, scope("POST", "/api/v1/notes/", [("content-length", str(declared))]))

    assert client.status == 413
    assert client.json()["error"]["code"] == "request_too_large"
    assert client.headers[b"content-type"] == b"application/json"
    assert client.headers[b"connection"] == b"close"
    assert client.reads == 0


@pytest.mark.parametrize(
    ("headers", "chunks"),
    [
        ([("content-length", "9999999")], [(b"x", True)]),
        ([("transfer-encoding", "chunked")], [(b"x" * 1000, True)] * 100),
    ],
    ids=["declared", "chunked"],
)
def test_an_oversize_mcp_request_is_refused_in_json_rpc(settings, headers, chunks):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 4096
    client = Client(chunks)

    run(client, scope("POST", "/mcp", [("content-type", "application/json"), *headers]))

    assert client.status == 413
    body = client.json()
    assert body["jsonrpc"] == "2.0"
    assert "id" not in body  # the request's id was never read
    assert body["error"]["code"] == -32600
    assert body["error"]["data"]["error"]["code"] == "request_too_large"


def test_a_body_without_a_declared_length_is_cut_off_at_the_limit(settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 4096
    client = Client([(b"x" * 1000, True)] * 100)

    run(client, scope("POST", "/api/v1/notes/", [("transfer-encoding", "chunked")]))

    assert client.status == 413
    assert client.json()["error"]["code"] == "request_too_large"
    assert client.reads == 5  # the fifth thousand bytes crossed the limit; no more was read


def test_a_body_that_stalls_gets_408_after_the_body_timeout(settings):
    settings.PLUMB_BODY_TIMEOUT = 0.2

    async def stall() -> None:
        await asyncio.sleep(3600)

    client = Client([(b"{", True)], then=stall)

    run(client, scope("POST", "/api/v1/notes/", [("content-length", "100")]))

    assert client.status == 408
    error = client.json()["error"]
    assert error["code"] == "request_timeout"
    assert "0.2 seconds" in error["message"]


def test_the_body_deadline_holds_when_the_servers_receive_swallows_a_cancellation(settings):
    """Python 3.11's ``asyncio.wait_for`` (inside gunicorn's ``receive``) loses a
    cancellation that lands as data arrives; the deadline must not depend on it."""
    settings.PLUMB_BODY_TIMEOUT = 0.2

    async def scenario() -> Client:
        client = Client()
        swallowed = []

        async def receive() -> dict:  # a trickle whose wait turns a cancel into a byte
            client.reads += 1
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                if swallowed:  # once: the test's own time limit must still bite
                    raise
                swallowed.append(True)
            return {"type": "http.request", "body": b"a", "more_body": True}

        await asyncio.wait_for(
            front.application(
                scope("POST", "/api/v1/notes/", [("content-length", "1000")]),
                receive,
                client.send,
            ),
            5,
        )
        return client

    client = asyncio.run(scenario())

    assert client.status == 408
    assert client.reads < 10


def counted(operation: str, method: str, status: int, what: str = "total") -> float:
    """plumb_requests_total (or a duration's ``sum``) for these labels, in this process."""
    name = "plumb_requests_total" if what == "total" else f"plumb_request_duration_seconds_{what}"
    labels = {"operation": operation, "method": method, "status": str(status)}
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_client_gone_before_its_body_arrived_is_logged_and_counted_as_499_not_500():
    client = Client([(b"{", True)], then=leaves)
    before = counted("notes", "POST", 499)

    run(client, scope("POST", "/api/v1/notes/", [("content-length", "100")]))

    assert client.status == 499
    assert counted("notes", "POST", 499) - before == 1


@pytest.mark.django_db(transaction=True)
def test_a_body_that_arrives_whole_reaches_django():
    body = json.dumps({"to": "bob", "body": "hi"}).encode()
    client = Client([(body[:5], True), (body[5:], False)])

    run(client, scope("POST", "/api/v1/notes/", [("content-type", "application/json")]))

    # Django read it: no credentials, so DRF's refusal, in the JSON shape.
    assert client.status == 401
    assert client.json()["error"]["code"] == "not_authenticated"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("path", "accept"),
    [("/api/v1/notes/", "application/json"), ("/healthz", "*/*"), ("/admin/login/", "text/html")],
)
def test_every_answer_states_the_length_of_its_body_once(path, accept):
    """The API's paths skip Django's CommonMiddleware, which states it; the front does."""
    client = run(Client([(b"", False)]), scope("GET", path, [("accept", accept)]))

    body = b"".join(m.get("body", b"") for m in client.sent if m["type"] == "http.response.body")
    lengths = [v for k, v in client.sent[0]["headers"] if k.lower() == b"content-length"]
    assert body
    assert lengths == [str(len(body)).encode()]


@pytest.mark.django_db(transaction=True)
def test_a_trickling_body_holds_neither_a_thread_nor_the_gate(monkeypatch, one_thread):
    """With one thread and a one-seat gate, a request whose body is still
    arriving leaves both free: another request is answered meanwhile."""
    monkeypatch.setattr(gate_module, "_gate", RequestGate(1))

    async def scenario() -> tuple[Client, Client]:
        stalled, more = asyncio.Event(), asyncio.Event()

        async def wait_for_more() -> None:
            stalled.set()
            await more.wait()

        slow = Client([(b'{"to": ', True)], then=wait_for_more)
        slow_request = asyncio.create_task(
            front.application(
                scope("POST", "/api/v1/notes/", [("content-length", "100")]),
                slow.receive,
                slow.send,
            )
        )
        await stalled.wait()  # its body is still arriving
        assert slow.sent == []

        quick = Client([(b"", False)])
        await asyncio.wait_for(front.application(scope(), quick.receive, quick.send), 30)

        more.set()
        await slow_request
        return slow, quick

    slow, quick = asyncio.run(scenario())

    assert quick.status == 200
    assert quick.json() == {"status": "ok"}
    assert slow.status == 499  # it left without finishing its body


def test_lifespan_listens_for_wake_ups_from_start_to_shutdown(monkeypatch):
    events: list[str] = []

    class Listening:
        async def close(self) -> None:
            events.append("stopped listening")

    def listen() -> Listening:
        events.append("listening")
        return Listening()

    monkeypatch.setattr(front.wake, "listen", listen)
    messages = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]

    async def receive() -> dict:
        return messages.pop(0)

    async def send(message: dict) -> None:
        events.append(message["type"])

    asyncio.run(front.application({"type": "lifespan"}, receive, send))

    assert events == [
        "listening",
        "lifespan.startup.complete",
        "lifespan.shutdown.complete",
        "stopped listening",
    ]


# --- waiting calls park on the event loop ------------------------------------------------


def authorized(target: str, token: str) -> dict:
    path, _, query = target.partition("?")
    request = scope("GET", path, [("authorization", f"Bearer {token}")])
    request["query_string"] = query.encode()
    return request


async def until(condition, what: str) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


@pytest.fixture
def one_thread(monkeypatch):
    """Django gets one thread: a waiting call that held it would stop every other.

    Its connection is closed after the test (PostgreSQL drops the test
    database only once nobody uses it)."""
    threads = ThreadPoolExecutor(1)
    monkeypatch.setattr(front, "django_threads", threads)
    yield
    threads_close_their_connections(threads, 1)
    threads.shutdown()


@pytest.fixture
def mailbox(transactional_db):
    workspace = WorkspaceFactory(slug="main")
    return {
        "alice": SessionFactory(workspace=workspace, name="alice"),
        "bob": SessionFactory(workspace=workspace, name="bob"),
    }


def staying() -> Client:
    """A client that keeps its connection open until ``leave`` is set."""
    client = Client([(b"", False)])
    client.leave = asyncio.Event()
    client.then = client.leave.wait
    return client


def polling(token: str) -> tuple[Client, asyncio.Task]:
    """A long-poll for notes (wait=20) by a client that stays; call it on the loop."""
    poll = staying()
    request = authorized("/api/v1/notes/?wait=20", token)
    return poll, asyncio.create_task(front.application(request, poll.receive, poll.send))


@pytest.mark.django_db(transaction=True)
def test_a_client_that_leaves_while_django_answers_is_answered_and_counted_as_499(monkeypatch):
    django = front._django
    before = counted("healthz", "GET", 499)

    async def scenario() -> Client:
        loop = asyncio.get_running_loop()
        client = staying()

        def answer_once_the_client_has_left(*args):
            outcome = django(*args)
            loop.call_soon_threadsafe(client.leave.set)
            assert client.left.wait(10)
            return outcome

        monkeypatch.setattr(front, "_django", answer_once_the_client_has_left)
        await asyncio.wait_for(front.application(scope(), client.receive, client.send), 10)
        return client

    client = asyncio.run(scenario())

    assert client.status == 499
    assert counted("healthz", "GET", 499) - before == 1


def test_a_waiting_call_parks_and_its_thread_serves_others_meanwhile(one_thread, mailbox):
    async def scenario() -> tuple[Client, Client]:
        poll, waiting = polling(mailbox["bob"].raw_token)
        await until(lambda: front.parked_calls() == 1, "the poll parked")

        health = Client([(b"", False)])
        await asyncio.wait_for(front.application(scope(), health.receive, health.send), 10)
        await asyncio.to_thread(note_leave, mailbox["alice"], to="bob", body="wake")
        await asyncio.wait_for(waiting, 10)
        return poll, health

    poll, health = asyncio.run(scenario())

    assert health.status == 200
    assert poll.status == 200
    assert [note["body"] for note in poll.json()["notes"]] == ["wake"]
    assert front.parked_calls() == 0
    assert wake.subscriptions() == 0


def test_a_call_of_the_session_one_too_many_ends_a_parked_one(one_thread, mailbox):
    async def scenario() -> tuple[Client, Client]:
        token = mailbox["bob"].raw_token
        older, newer = staying(), staying()
        first = asyncio.create_task(
            front.application(
                authorized("/api/v1/notes/?wait=20", token), older.receive, older.send
            )
        )
        await until(lambda: front.parked_calls() == 1, "the first poll parked")
        await asyncio.to_thread(fill_but_one, mailbox["bob"])
        second = asyncio.create_task(
            front.application(
                authorized("/api/v1/notes/?wait=20", token), newer.receive, newer.send
            )
        )
        await asyncio.wait_for(first, 10)
        await until(lambda: front.parked_calls() == 1, "the second poll parked")
        await asyncio.to_thread(note_leave, mailbox["alice"], to="bob", body="for the newer")
        await asyncio.wait_for(second, 10)
        return older, newer

    older, newer = asyncio.run(scenario())

    assert older.json()["notes"] == []
    assert [note["body"] for note in newer.json()["notes"]] == ["for the newer"]


def test_a_parked_call_whose_client_leaves_is_let_go_and_counted_as_499(one_thread, mailbox):
    async def scenario() -> Client:
        poll, waiting = polling(mailbox["bob"].raw_token)
        await until(lambda: front.parked_calls() == 1, "the poll parked")
        poll.leave.set()
        await asyncio.wait_for(waiting, 10)
        return poll

    before = counted("notes", "GET", 499)
    poll = asyncio.run(scenario())

    assert poll.status == 499
    assert counted("notes", "GET", 499) - before == 1
    assert front.parked_calls() == 0
    assert wake.subscriptions() == 0


def test_a_parked_calls_counted_duration_holds_its_wait(one_thread, mailbox):
    before = counted("notes", "GET", 200, "sum")

    async def scenario() -> Client:
        poll = staying()
        await asyncio.wait_for(
            front.application(
                authorized("/api/v1/notes/?wait=1", mailbox["bob"].raw_token),
                poll.receive,
                poll.send,
            ),
            10,
        )
        return poll

    poll = asyncio.run(scenario())

    assert poll.json()["notes"] == []
    # It parked for its whole second: the duration cannot be shorter.
    assert counted("notes", "GET", 200, "sum") - before >= 1.0


def test_past_the_parked_bound_a_call_waits_in_its_thread(mailbox, settings):
    settings.PLUMB_PARKED_POLLS = 0

    async def scenario() -> Client:
        poll = staying()
        await asyncio.wait_for(
            front.application(
                authorized("/api/v1/notes/?wait=0.3", mailbox["bob"].raw_token),
                poll.receive,
                poll.send,
            ),
            10,
        )
        return poll

    poll = asyncio.run(scenario())

    assert poll.json()["notes"] == []
    assert front.parked_calls() == 0


def polls_waiting() -> float:
    """plumb_polls_waiting in this process."""
    return REGISTRY.get_sample_value("plumb_polls_waiting") or 0.0


def test_past_the_parked_bound_a_call_waiting_in_its_thread_lets_other_calls_through(
    mailbox, settings, monkeypatch
):
    """Behind a gate of one seat, every run takes turns in one job (common/inturn.py).

    A poll past the parked bound waits in its thread: it steps aside, and the
    note that ends its wait, queued behind it, is let through meanwhile. Set
    up alike on both databases (PostgreSQL's gate is open by default).
    """
    settings.PLUMB_PARKED_POLLS = 0
    monkeypatch.setattr(gate_module, "_gate", RequestGate(1))
    monkeypatch.setattr(front, "_in_turn", inturn.InTurn(lambda: front.django_threads, jobs=1))
    before = polls_waiting()

    async def scenario() -> tuple[Client, Client]:
        poll, waiting = polling(mailbox["bob"].raw_token)
        await until(lambda: polls_waiting() - before == 1, "the poll waits in its thread")
        body = json.dumps({"to": "bob", "body": "wake"}).encode()
        note = Client([(body, False)])
        request = scope(
            "POST",
            "/api/v1/notes/",
            [
                ("authorization", f"Bearer {mailbox['alice'].raw_token}"),
                ("content-type", "application/json"),
                ("content-length", str(len(body))),
            ],
        )
        await asyncio.wait_for(front.application(request, note.receive, note.send), 10)
        await asyncio.wait_for(waiting, 10)
        return poll, note

    poll, note = asyncio.run(scenario())

    assert note.status == 201
    assert [n["id"] for n in poll.json()["notes"]] == [note.json()["note"]["id"]]
    assert front.parked_calls() == 0


def test_a_poll_whose_wait_ran_out_answers_with_the_queries_of_a_plain_check(
    one_thread, mailbox, monkeypatch
):
    """The run at the deadline trusts its own authentication's hint: no claim query."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    runs: list[tuple[bool, int]] = []
    django = front._django

    def with_queries(request_scope, body, may_park, resumed, *labels):
        with CaptureQueriesContext(connection) as queries:
            outcome = django(request_scope, body, may_park, resumed, *labels)
        runs.append((resumed is not None, len(queries)))
        return outcome

    monkeypatch.setattr(front, "_django", with_queries)
    token = mailbox["bob"].raw_token
    plain = run(Client([(b"", False)]), authorized("/api/v1/notes/", token))
    poll = staying()
    asyncio.run(
        asyncio.wait_for(
            front.application(authorized("/api/v1/notes/?wait=1", token), poll.receive, poll.send),
            10,
        )
    )

    assert plain.json()["notes"] == []
    assert poll.json()["notes"] == []
    (plain_run, first_run, last_run) = runs
    assert [plain_run[0], first_run[0], last_run[0]] == [False, False, True]
    assert last_run[1] == plain_run[1]


# --- a parked call is one call to the rate limits ----------------------------------------


def parked_then_woken(token: str, between) -> Client:
    """A notes poll that parks; ``between()`` runs (in a thread); a note to bob wakes it."""

    async def scenario() -> Client:
        poll = staying()
        waiting = asyncio.create_task(
            front.application(authorized("/api/v1/notes/?wait=20", token), poll.receive, poll.send)
        )
        await until(lambda: front.parked_calls() == 1, "the poll parked")
        await asyncio.to_thread(between)
        await asyncio.wait_for(waiting, 10)
        return poll

    return asyncio.run(scenario())


def test_a_woken_call_is_not_counted_again_against_the_session_rate(one_thread, mailbox, settings):
    """Counted once, when it was made, as a call that waits in its thread is: woken
    at the rate, it still answers with what woke it."""
    settings.PLUMB_RATE_SESSION = "1/min"
    token = mailbox["bob"].raw_token

    poll = parked_then_woken(
        token, lambda: note_leave(mailbox["alice"], to="bob", body="counted once")
    )
    after = run(Client([(b"", False)]), authorized("/api/v1/notes/", token))

    assert poll.status == 200, poll.sent
    assert [note["body"] for note in poll.json()["notes"]] == ["counted once"]
    # The rate holds: the poll took the minute's one call.
    assert after.status == 429
    assert after.json()["error"]["code"] == "throttled"


def test_a_woken_call_is_answered_though_its_address_reached_the_failure_rate_meanwhile(
    one_thread, mailbox, settings
):
    """Its credential was checked, and answered, when the call was made: a later run
    has no guess to refuse. A new call from the address is refused."""
    settings.PLUMB_RATE_AUTH_FAIL = "2/min"
    token = mailbox["bob"].raw_token

    def guess_then_note() -> None:
        for _ in range(2):
            guess = run(Client([(b"", False)]), authorized("/api/v1/notes/", "plumb_s_nothing"))
            assert guess.status == 401, guess.sent
        note_leave(mailbox["alice"], to="bob", body="still answered")

    poll = parked_then_woken(token, guess_then_note)
    after = run(Client([(b"", False)]), authorized("/api/v1/notes/", token))

    assert poll.status == 200, poll.sent
    assert [note["body"] for note in poll.json()["notes"]] == ["still answered"]
    assert after.status == 429


# _within: asyncio.wait({future}, timeout=...) for the one future a body waits on.


async def _waited(done_after: float | None, timeout: float) -> tuple[bool, asyncio.Future, list]:
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    if done_after is not None:
        loop.call_later(done_after, future.set_result, "chunk")
    arrived = await front._within(loop, future, timeout)
    timers = [h for h in loop._scheduled if not h.cancelled() and h._callback != future.set_result]
    return arrived, future, list(getattr(future, "_callbacks", None) or []) + timers


@pytest.mark.parametrize(
    ("done_after", "timeout", "expected"),
    [(0, 5, True), (0.01, 5, True), (None, 0.02, False), (5, 0.02, False), (None, 0, False)],
)
def test_a_future_is_waited_for_as_asyncio_wait_waits_and_is_never_cancelled(
    done_after, timeout, expected
):
    async def both():
        ours = await _waited(done_after, timeout)
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if done_after is not None:
            loop.call_later(done_after, future.set_result, "chunk")
        done, _ = await asyncio.wait({future}, timeout=timeout)
        return ours, bool(done)

    (arrived, future, callbacks_left), asyncios = asyncio.run(both())

    assert arrived is asyncios is expected
    assert not future.cancelled()
    assert callbacks_left == []  # nothing of the wait is left on the future or the loop


def test_a_wait_cancelled_from_outside_leaves_the_future_as_it_was():
    async def scenario():
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        waiting = asyncio.ensure_future(front._within(loop, future, 5))
        await asyncio.sleep(0.01)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        return future

    future = asyncio.run(scenario())

    assert not future.done()
    assert not future._callbacks
