"""A call leaves nothing for the cyclic garbage collector: its objects go as it ends.

DRF's view, request and answer hold one another in circles, which only the
collector frees, at 20 to 30 µs a request (``mailbox.api.base._let_go``).
Each call here runs through the server's own WSGI application, as plumb's
front runs it (the test client keeps the request and answer it hands back,
in circles of its own), and the collector is asked what it found.
"""

from __future__ import annotations

import gc
import io
import json
import sys

import pytest
from django.core import signals
from django.db import close_old_connections
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mailbox.services import note_leave
from plumb_site.wsgi import application
from rooms.services import room_create, room_join
from tests.factories import SessionFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _connection_kept():
    """As Django's test client does: the test's transaction outlives each call."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


@pytest.fixture
def pair(workspace):
    alice = SessionFactory(workspace=workspace, name="alice")
    bob = SessionFactory(workspace=workspace, name="bob")
    room_create(alice, slug="lab")
    room_join(bob, "lab")
    note_leave(alice, body="for bob", to="bob")
    return alice, bob


def _call(method: str, path: str, token: str, body: dict | None = None) -> int:
    """One call through the WSGI application, its answer read and closed as a server does."""
    payload = json.dumps(body).encode() if body is not None else b""
    path, _, query = path.partition("?")
    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "SERVER_NAME": "testserver",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_HOST": "testserver",
        "HTTP_AUTHORIZATION": f"Bearer {token}",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(payload)),
        "wsgi.input": io.BytesIO(payload),
        "wsgi.errors": sys.stderr,
        "wsgi.url_scheme": "http",
    }
    started = []
    answer = application(environ, lambda status, headers, exc_info=None: started.append(status))
    try:
        b"".join(answer)
    finally:
        answer.close()
    return int(started[0].split()[0])


def _left_in_circles(call) -> tuple[int, list[str]]:
    """The status of ``call()``, and the API objects the collector found unreachable after it."""
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        status = call()
        gc.collect()
        found = sorted(
            type(o).__qualname__
            for o in gc.garbage
            if isinstance(o, APIView | Request | Response) or type(o).__name__ == "WSGIRequest"
        )
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    return status, found


@pytest.mark.parametrize(
    ("method", "path", "body", "expected"),
    [
        ("GET", "/api/v1/sessions/current/", None, 200),  # the floor
        ("POST", "/api/v1/rooms/lab/messages/", {"body": "hello"}, 201),
        ("GET", "/api/v1/rooms/lab/messages/?limit=50", None, 200),
        ("POST", "/api/v1/notes/", {"to": "alice", "body": "back to you"}, 201),
        ("GET", "/api/v1/notes/", None, 200),  # delivers alice's note
        ("GET", "/api/v1/rooms/nowhere/messages/", None, 404),
        ("POST", "/api/v1/rooms/lab/messages/", {"body": ""}, 400),
    ],
)
def test_a_call_leaves_no_circles(pair, method, path, body, expected):
    bob = pair[1]
    _call("GET", "/api/v1/sessions/current/", bob.raw_token)  # the first call imports and caches

    status, found = _left_in_circles(lambda: _call(method, path, bob.raw_token, body))

    assert status == expected
    assert found == []


def test_a_refused_credential_leaves_no_circles(pair):
    status, found = _left_in_circles(
        lambda: _call("GET", "/api/v1/sessions/current/", "plumb_tok_nothing0_" + "x" * 43)
    )

    assert status == 401
    assert found == []
