"""A waiting call ends with its rights (SPEC §3.3), under gunicorn as ``make serve``
runs it, in both serving modes:

* parked (the default): the call holds no thread while it waits, and runs
  its request again when woken, authentication included;
* in a thread (``PLUMB_PARKED_POLLS=0``, as past the parked cap or under a
  plain WSGI server): the call re-checks in its thread when woken.

Ending the session, revoking its key, or removing the caller from the room
it waits on answers the waiting call within a second, with the ``401`` or
``403`` a new call would get; and a note sent after the end never rides on
that answer.
"""

from __future__ import annotations

import threading
import time

import pytest

from mailbox.models import Note
from mailbox.services import key_revoke
from rooms.models import Member
from rooms.services import member_remove, room_create, room_join
from tests.factories import ProjectKeyFactory, SessionFactory, WorkspaceFactory
from tests.scale.harness import PlumbServer, call, database_url, report

pytestmark = pytest.mark.django_db(transaction=True)

WAIT = 25  # what each call asks to wait: far longer than the answer may take
ANSWER_WITHIN = 1.0  # seconds from the end of its rights to its answer


@pytest.fixture(scope="module", params=["parked", "thread"])
def mode_server(request, django_db_setup, tmp_path_factory):
    extra = {"PLUMB_PARKED_POLLS": "0"} if request.param == "thread" else {}
    plumb = PlumbServer(
        database_url(),
        workdir=tmp_path_factory.mktemp(request.param),
        workers=2,
        extra_env=extra,
    )
    plumb.start()
    try:
        yield request.param, plumb
    finally:
        plumb.stop()


class Waiting(threading.Thread):
    """One waiting call over HTTP; ``answer`` is (seconds after ``ended``, status, body)."""

    def __init__(self, url: str, token: str) -> None:
        super().__init__(daemon=True)
        self.url, self.token = url, token
        self.status: int | None = None
        self.body: dict = {}
        self.answered_at: float | None = None

    def run(self) -> None:
        self.status, self.body = call("GET", self.url, token=self.token, timeout=WAIT + 10)
        self.answered_at = time.monotonic()


def _world():
    workspace = WorkspaceFactory(slug="main")
    key = ProjectKeyFactory(project=workspace.project)
    alice = SessionFactory(workspace=workspace, name="alice", project_key=key)
    bob = SessionFactory(workspace=workspace, name="bob")
    room_create(bob, slug="lab")
    room_join(alice, "lab")
    return key, alice, bob


def _waiting(server: PlumbServer, path: str, token: str) -> Waiting:
    waiting = Waiting(f"{server.url}/api/v1{path}", token)
    waiting.start()
    time.sleep(1.0)  # it has recorded its ticket and sleeps
    assert waiting.status is None, waiting.body
    return waiting


def _answered(waiting: Waiting, ended: float) -> float:
    waiting.join(WAIT + 10)
    assert waiting.answered_at is not None
    return waiting.answered_at - ended


ENDS = [
    (f"/notes/?wait={WAIT}", "session", 401, "session_ended"),
    (f"/notes/?wait={WAIT}", "key", 401, "key_revoked"),
    (f"/activity/?wait={WAIT}", "key", 401, "key_revoked"),
    (f"/rooms/lab/messages/?wait={WAIT}", "session", 401, "session_ended"),
    (f"/rooms/lab/messages/?wait={WAIT}&kinds=message", "removed", 403, "not_a_member"),
]


def _end(server: PlumbServer, end: str, key, alice) -> None:
    """End alice's rights: through the server, or as an operator on its host."""
    if end == "session":
        url = f"{server.url}/api/v1/sessions/current/"
        assert call("DELETE", url, token=alice.raw_token)[0] == 200
    elif end == "key":
        key_revoke(key, actor="test", reason="rotated")
    else:
        member = Member.objects.get(room__slug="lab", name=alice.name)
        member_remove(member, actor="test", reason="off topic")


@pytest.fixture
def on_its_host(mode_server, settings):
    """This process's commits wake the server's waiting calls, as the admin's and the
    ``plumb`` command's do on the server's host."""
    settings.VAR_DIR = mode_server[1].var_dir
    return mode_server


@pytest.mark.parametrize(("path", "end", "status", "code"), ENDS)
def test_a_waiting_call_answers_at_once_when_its_rights_end(on_its_host, path, end, status, code):
    mode, server = on_its_host
    key, alice, _ = _world()
    waiting = _waiting(server, path, alice.raw_token)

    _end(server, end, key, alice)
    took = _answered(waiting, time.monotonic())

    figures = {"answered after ms": f"{took * 1000:.0f}"}
    report(f"{mode}: {end} ends {path.split('?')[0]}", figures, {})
    assert (waiting.status, waiting.body["error"]["code"]) == (status, code)
    assert took < ANSWER_WITHIN


@pytest.mark.parametrize(("path", "end", "status", "code"), ENDS)
def test_a_note_sent_after_the_end_never_rides_on_the_answer(on_its_host, path, end, status, code):
    _, server = on_its_host
    key, alice, bob = _world()
    waiting = _waiting(server, path, alice.raw_token)

    _end(server, end, key, alice)
    late = {"body": "late", "to": "alice"}
    assert call("POST", f"{server.url}/api/v1/notes/", token=bob.raw_token, body=late)[0] == 201
    waiting.join(WAIT + 10)

    assert (waiting.status, waiting.body["error"]["code"]) == (status, code)
    assert "notes" not in waiting.body
    if end != "removed":
        assert Note.objects.get(body="late").delivered_at is None
