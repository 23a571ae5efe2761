"""The request gate: one request at a time per process runs Django code.

The rules are checked on ``RequestGate`` with real threads; the WSGI entry
point is then driven from threads as a server would, to show that a parked
long-poll lets other requests through and that bodies are read before the
gate is taken.
"""

from __future__ import annotations

import io
import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection, transaction
from prometheus_client import REGISTRY

from common import gate as gate_module
from common import wake
from common.gate import RequestGate
from mailbox.models import Note
from plumb_site.wsgi import application
from tests.factories import SessionFactory, WorkspaceFactory

TIMEOUT = 10


def enter_in_thread(gate: RequestGate) -> tuple[threading.Thread, threading.Event, threading.Event]:
    """A thread that takes the gate, says so, and leaves when told."""
    entered, leave = threading.Event(), threading.Event()

    def body():
        with gate.admitted():
            entered.set()
            leave.wait(TIMEOUT)

    thread = threading.Thread(target=body)
    thread.start()
    return thread, entered, leave


def test_one_request_at_a_time():
    gate = RequestGate(1)
    first, first_in, first_out = enter_in_thread(gate)
    assert first_in.wait(TIMEOUT)
    second, second_in, second_out = enter_in_thread(gate)

    assert not second_in.wait(0.2)
    first_out.set()
    assert second_in.wait(TIMEOUT)
    second_out.set()
    first.join(TIMEOUT)
    second.join(TIMEOUT)
    assert not gate.holds()


def test_a_wider_gate_admits_that_many():
    gate = RequestGate(2)
    runs = [enter_in_thread(gate) for _ in range(3)]

    admitted = [entered.wait(0.5) for _, entered, _ in runs[:2]]
    assert admitted == [True, True]
    assert not runs[2][1].wait(0.2)
    runs[0][2].set()
    assert runs[2][1].wait(TIMEOUT)
    for thread, _, leave in runs:
        leave.set()
        thread.join(TIMEOUT)


def test_width_zero_admits_everyone():
    gate = RequestGate(0)
    runs = [enter_in_thread(gate) for _ in range(4)]

    assert all(entered.wait(TIMEOUT) for _, entered, _ in runs)
    for thread, _, leave in runs:
        leave.set()
        thread.join(TIMEOUT)


def test_admission_is_reentrant_within_a_thread():
    gate = RequestGate(1)
    with gate.admitted(), gate.admitted():
        assert gate.holds()
    assert not gate.holds()
    # Released once, not twice: a second thread gets in, a third waits.
    first, first_in, first_out = enter_in_thread(gate)
    assert first_in.wait(TIMEOUT)
    second, second_in, second_out = enter_in_thread(gate)
    assert not second_in.wait(0.2)
    first_out.set()
    second_out.set()
    first.join(TIMEOUT)
    second.join(TIMEOUT)


def test_stepping_aside_lets_another_request_in_and_takes_the_place_back():
    gate = RequestGate(1)
    order = []
    stepped_aside, other_done = threading.Event(), threading.Event()

    def waiter():
        with gate.admitted():
            with gate.stepped_aside():
                assert not gate.holds()
                stepped_aside.set()
                other_done.wait(TIMEOUT)
            order.append("waiter back")
            assert gate.holds()

    def other():
        stepped_aside.wait(TIMEOUT)
        with gate.admitted():
            order.append("other in")
        other_done.set()

    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(waiter), pool.submit(other)]
        for future in futures:
            future.result(TIMEOUT)
    assert order == ["other in", "waiter back"]


def test_stepping_aside_waits_for_a_place_to_come_back():
    gate = RequestGate(1)
    stepped_aside, back = threading.Event(), threading.Event()

    def waiter():
        with gate.admitted():
            with gate.stepped_aside():
                stepped_aside.set()
            back.set()

    assert not gate.holds()
    with gate.admitted():
        thread = threading.Thread(target=waiter)
        thread.start()
        # The waiter cannot even start while this thread holds the only place.
        assert not stepped_aside.wait(0.2)
    assert back.wait(TIMEOUT)
    thread.join(TIMEOUT)


def test_stepping_aside_without_a_place_changes_nothing():
    gate = RequestGate(1)
    with gate.stepped_aside():
        assert not gate.holds()
    thread, entered, leave = enter_in_thread(gate)
    assert entered.wait(TIMEOUT)
    leave.set()
    thread.join(TIMEOUT)


@pytest.mark.django_db
def test_a_request_inside_a_transaction_keeps_its_place():
    gate = RequestGate(1)
    with transaction.atomic(), gate.admitted():
        thread, entered, leave = enter_in_thread(gate)
        with gate.stepped_aside():
            assert gate.holds()
            assert not entered.wait(0.2)
    assert entered.wait(TIMEOUT)
    leave.set()
    thread.join(TIMEOUT)


def gate_waits() -> tuple[float, float]:
    """(count, sum) of plumb_gate_wait_seconds in this process."""
    count = REGISTRY.get_sample_value("plumb_gate_wait_seconds_count") or 0.0
    return count, REGISTRY.get_sample_value("plumb_gate_wait_seconds_sum") or 0.0


def test_each_admission_and_its_wait_for_a_turn_is_observed():
    gate = RequestGate(1)
    count_before, sum_before = gate_waits()
    first, first_in, first_out = enter_in_thread(gate)
    assert first_in.wait(TIMEOUT)
    second, second_in, second_out = enter_in_thread(gate)
    assert not second_in.wait(0.3)
    first_out.set()
    assert second_in.wait(TIMEOUT)
    second_out.set()
    first.join(TIMEOUT)
    second.join(TIMEOUT)

    count_after, sum_after = gate_waits()
    assert count_after - count_before == 2
    assert sum_after - sum_before >= 0.3  # the second waited at least that long


def test_an_open_gate_observes_nothing():
    before = gate_waits()

    with RequestGate(0).admitted():
        pass

    assert gate_waits() == before


def test_the_default_gate_is_one_on_sqlite_and_open_on_postgresql(settings):
    width = settings.PLUMB_ACTIVE_REQUESTS

    assert width == (1 if connection.vendor == "sqlite" else 0)


def test_the_process_gate_takes_its_width_from_settings(settings, monkeypatch):
    monkeypatch.setattr(gate_module, "_gate", None)
    settings.PLUMB_ACTIVE_REQUESTS = 3

    assert gate_module.gate().width == 3
    assert gate_module.gate() is gate_module.gate()


# --- through the WSGI entry point --------------------------------------------------------


def call(method, path, token, body=None, *, stream=None, content_length=None):
    """One request through plumb_site.wsgi.application, as a WSGI server makes it."""
    raw = json.dumps(body).encode() if body is not None else b""
    path, _, query = path.partition("?")
    captured = {}

    def start_response(status, headers):
        captured["status"] = int(status.split()[0])
        captured["content_type"] = dict(headers)["Content-Type"]

    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "SERVER_NAME": "testserver",
        "SERVER_PORT": "80",
        "HTTP_HOST": "testserver",
        "HTTP_AUTHORIZATION": f"Bearer {token}",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(raw) if content_length is None else content_length),
        "wsgi.input": stream or io.BytesIO(raw),
        "wsgi.url_scheme": "http",
        "wsgi.errors": io.StringIO(),
    }
    response = application(environ, start_response)
    try:
        content = b"".join(response)
    finally:
        getattr(response, "close", lambda: None)()
    assert captured["content_type"].startswith("application/json")
    return captured["status"], json.loads(content)


@pytest.fixture
def one_at_a_time(monkeypatch):
    gate = RequestGate(1)
    monkeypatch.setattr(gate_module, "_gate", gate)
    return gate


@pytest.fixture
def peers(settings):
    settings.PLUMB_RATE_SESSION = None
    workspace = WorkspaceFactory(slug="main")
    return SessionFactory(workspace=workspace, name="alice"), SessionFactory(
        workspace=workspace, name="bob"
    )


@pytest.mark.django_db(transaction=True)
def test_a_parked_long_poll_lets_the_note_it_waits_for_through(one_at_a_time, peers, monkeypatch):
    alice, bob = peers
    parked = threading.Event()
    real_wait = wake.Subscription.wait

    def wait(subscription, timeout):
        parked.set()
        return real_wait(subscription, timeout)

    monkeypatch.setattr(wake.Subscription, "wait", wait)

    with ThreadPoolExecutor(max_workers=1) as pool:
        polled = pool.submit(call, "GET", "/api/v1/notes/?wait=10", bob.raw_token)
        assert parked.wait(TIMEOUT)
        # Had the poller kept its place, this would wait out its 10 s and the
        # poll would come back empty.
        status, sent = call(
            "POST", "/api/v1/notes/", alice.raw_token, body={"body": "wake", "to": "bob"}
        )
        poll_status, polled_body = polled.result(TIMEOUT * 2)

    assert status == 201, sent
    assert poll_status == 200
    assert [note["id"] for note in polled_body["notes"]] == [sent["note"]["id"]]
    assert not one_at_a_time.holds()


class Recording(io.BytesIO):
    """A request body that notes whether the gate was held while it was read."""

    def __init__(self, data, gate):
        super().__init__(data)
        self.gate = gate
        self.read_inside_gate = []

    def read(self, *args):
        self.read_inside_gate.append(self.gate.holds())
        return super().read(*args)


@pytest.mark.django_db(transaction=True)
def test_the_body_is_read_before_the_gate_is_taken(one_at_a_time, peers):
    alice, _ = peers
    raw = json.dumps({"body": "read early", "to": "bob"}).encode()
    stream = Recording(raw, one_at_a_time)

    status, body = call(
        "POST", "/api/v1/notes/", alice.raw_token, stream=stream, content_length=len(raw)
    )

    assert status == 201, body
    assert stream.read_inside_gate == [False]
    assert Note.objects.get(public_id=body["note"]["id"]).body == "read early"


class Broken(io.BytesIO):
    """A client that went away in the middle of its body."""

    def read(self, *args):
        raise ConnectionResetError("peer went away")


@pytest.mark.django_db(transaction=True)
def test_a_body_that_cannot_be_read_is_refused_in_the_error_shape(one_at_a_time, peers):
    alice, _ = peers

    status, body = call(
        "POST", "/api/v1/notes/", alice.raw_token, stream=Broken(), content_length=40
    )

    assert status == 400
    assert body["error"]["code"] == "bad_request"
    assert Note.objects.count() == 0
    assert not one_at_a_time.holds()


@pytest.mark.django_db(transaction=True)
def test_a_body_past_the_limit_is_refused_unread_and_outside_the_gate(
    one_at_a_time, peers, settings
):
    alice, _ = peers
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024
    raw = json.dumps({"body": "x" * 2000, "to": "bob"}).encode()
    stream = Recording(raw, one_at_a_time)

    status, body = call(
        "POST", "/api/v1/notes/", alice.raw_token, stream=stream, content_length=len(raw)
    )

    assert status == 413
    assert body["error"]["code"] == "request_too_large"
    # Issue 15: the API used to read it inside the gate, as slowly as the client sent it.
    assert stream.read_inside_gate == []
    assert Note.objects.count() == 0
