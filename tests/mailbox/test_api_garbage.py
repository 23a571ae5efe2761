"""A call leaves nothing for the cyclic garbage collector: its objects go as it ends.

DRF's view, request and answer hold one another in circles, which only the
collector frees, at 20 to 30 µs a request (``mailbox.api.base._let_go``).
Each call here runs through the server's own WSGI application, as plumb's
front runs it (the test client keeps the request and answer it hands back,
in circles of its own), and the collector is asked what it found.
"""

from __future__ import annotations

import gc

import pytest
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mailbox.services import note_leave
from rooms.services import room_create, room_join
from tests.common.test_gate import call  # through the WSGI application, as a server calls it
from tests.conftest import connection_kept
from tests.factories import SessionFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _connection_kept():
    """The test's transaction outlives each call."""
    with connection_kept():
        yield


@pytest.fixture
def pair(workspace):
    alice = SessionFactory(workspace=workspace, name="alice")
    bob = SessionFactory(workspace=workspace, name="bob")
    room_create(alice, slug="lab")
    room_join(bob, "lab")
    note_leave(alice, body="for bob", to="bob")
    return alice, bob


def _left_in_circles(run) -> tuple[int, list[str]]:
    """The status ``run()`` answered with, and the API objects the collector found after it."""
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        status = run()[0]
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
    call("GET", "/api/v1/sessions/current/", bob.raw_token)  # the first call imports and caches

    status, found = _left_in_circles(lambda: call(method, path, bob.raw_token, body))

    assert status == expected
    assert found == []


def test_a_refused_credential_leaves_no_circles(pair):
    status, found = _left_in_circles(
        lambda: call("GET", "/api/v1/sessions/current/", "plumb_tok_nothing0_" + "x" * 43)
    )

    assert status == 401
    assert found == []
