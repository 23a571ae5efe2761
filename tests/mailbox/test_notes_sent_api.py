"""``GET /api/v1/notes/sent/`` (list_sent_notes): a name's sent notes with their
state, paged, and a wait that ends when one of them is picked up (SPEC §3.6).
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from common import wake
from mailbox import services
from mailbox.models import Note
from tests.conftest import client_for
from tests.factories import AgentNameFactory, SessionFactory, WorkspaceFactory
from tests.hostwake import PROMPT, host_listener, other_process
from tests.live import call, no_rate_limits
from tests.mailbox.notes import NOTE_FIELDS, leave
from tests.races import first_sleep_of

pytestmark = pytest.mark.django_db

SENT = "/api/v1/notes/sent/"


def sent(session, **params):
    return client_for(session).get(SENT, params)


def test_sent_notes_come_newest_first_with_their_state(workspace, alice, bob):
    AgentNameFactory(handle="dave", workspace=workspace)
    to_bob = leave(alice, body="for bob", to="bob").json()["note"]
    to_dave = leave(alice, body="for dave", to="dave").json()["note"]
    leave(bob, body="not alice's", to="next")
    services.notes_claim(bob)

    response = sent(alice)

    assert response.status_code == 200
    body = response.json()
    assert [n["id"] for n in body["sent"]] == [to_dave["id"], to_bob["id"]]
    assert body["has_more"] is False
    newest, oldest = body["sent"]
    assert set(newest) == NOTE_FIELDS
    assert (newest["state"], newest["delivered_at"], newest["delivered_to"]) == (
        "waiting",
        None,
        None,
    )
    assert oldest["state"] == "delivered"
    assert oldest["delivered_to"] == {"name": "bob", "kind": "agent"}
    assert oldest["delivered_at"] is not None


def test_sent_notes_are_the_names_from_any_of_its_sessions(workspace, alice, bob):
    earlier = leave(alice, body="before the restart", to="bob").json()["note"]
    services.session_end(alice)
    again = SessionFactory(workspace=workspace, name="alice")

    response = sent(again)

    assert [n["id"] for n in response.json()["sent"]] == [earlier["id"]]


@pytest.mark.parametrize(
    ("state", "expected"),
    [("waiting", ["dave"]), ("delivered", ["bob"]), ("bounced", ["next"])],
)
def test_sent_notes_filter_by_state(workspace, alice, bob, state, expected):
    AgentNameFactory(handle="dave", workspace=workspace)
    old = services.note_leave(alice, to="next", body="hand-over").note
    services.notes_bounce(now=old.created_at + timedelta(days=8))
    leave(alice, body="for bob", to="bob")
    services.notes_claim(bob)
    leave(alice, body="for dave", to="dave")

    response = sent(alice, state=state)

    assert response.status_code == 200
    assert [n["to"] for n in response.json()["sent"]] == expected
    assert {n["state"] for n in response.json()["sent"]} == {state}


def test_sent_notes_page_by_after_id(alice, bob):
    ids = [leave(alice, body=f"note {i}", to="bob").json()["note"]["id"] for i in range(3)]

    first = sent(alice, limit=2).json()
    second = sent(alice, limit=2, after_id=first["sent"][-1]["id"]).json()

    assert [n["id"] for n in first["sent"]] == [ids[2], ids[1]]
    assert first["has_more"] is True
    assert [n["id"] for n in second["sent"]] == [ids[0]]
    assert second["has_more"] is False


@pytest.mark.parametrize(
    ("params", "code", "field"),
    [
        ({"state": "lost"}, "validation_error", "state"),
        ({"limit": 0}, "validation_error", "limit"),
        ({"wait": 31}, "validation_error", "wait"),
        ({"after_id": "note_nobodys"}, "note_not_found", None),
    ],
)
def test_bad_arguments_are_refused(alice, params, code, field):
    response = sent(alice, **params)

    assert response.json()["error"]["code"] == code
    if field:
        assert field in response.json()["error"]["details"]


def test_an_after_id_of_someone_elses_note_is_not_found(alice, bob):
    theirs = leave(bob, body="bob's", to="alice").json()["note"]["id"]

    response = sent(alice, after_id=theirs)

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "note_not_found"


def test_plumbs_notices_are_nobodys_sent_notes(alice):
    note = services.note_leave(alice, to="next", body="hand-over").note
    services.notes_bounce(now=note.created_at + timedelta(days=8))

    assert [n["id"] for n in sent(alice).json()["sent"]] == [note.public_id]
    assert Note.objects.filter(sender_kind="system").count() == 1


def test_listing_sent_notes_changes_nothing_and_costs_two_queries(
    alice, bob, settings, django_assert_num_queries
):
    settings.PLUMB_SEEN_WRITE_INTERVAL = 3600
    for i in range(3):
        leave(alice, body=f"note {i}", to="bob")
    services.notes_claim(bob)
    leave(alice, body="still waiting", to="bob")
    before = list(Note.objects.order_by("id").values_list("delivered_at", "claim"))
    client = client_for(alice)

    # Authentication (which finds nothing pending for alice) and the page.
    with django_assert_num_queries(2):
        response = client.get(SENT)

    assert [n["state"] for n in response.json()["sent"]] == ["waiting"] + ["delivered"] * 3
    assert list(Note.objects.order_by("id").values_list("delivered_at", "claim")) == before


def test_a_wait_with_nothing_waiting_answers_at_once(alice, bob):
    leave(alice, body="for bob", to="bob")
    services.notes_claim(bob)
    started = time.monotonic()

    response = sent(alice, state="waiting", wait=10)

    assert time.monotonic() - started < 2
    assert response.json()["sent"] == []


def test_a_wait_that_sees_no_pickup_answers_the_list_when_its_time_is_up(alice, bob):
    note = leave(alice, body="for bob", to="bob").json()["note"]
    started = time.monotonic()

    response = sent(alice, state="waiting", wait=0.5)

    assert time.monotonic() - started >= 0.5
    assert [n["id"] for n in response.json()["sent"]] == [note["id"]]


# --- waiting over real sockets ------------------------------------------------------------


@pytest.fixture
def live_pair(live_server, settings):
    no_rate_limits(settings)
    workspace = WorkspaceFactory(slug="main")
    alice = SessionFactory(workspace=workspace, name="alice")
    bob = SessionFactory(workspace=workspace, name="bob")
    return live_server.url, alice, bob


def wait_in_background(url: str, token: str, seconds: int) -> dict:
    answer: dict = {}

    def run() -> None:
        started = time.monotonic()
        answer["status"], answer["body"] = call(
            "GET", f"{url}/api/v1/notes/sent/?state=waiting&wait={seconds}", token=token
        )
        answer["ended"] = time.monotonic()
        answer["took"] = answer["ended"] - started

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    answer["thread"] = thread
    return answer


@pytest.mark.django_db(transaction=True)
def test_a_waiting_call_returns_as_soon_as_the_note_is_picked_up(live_pair):
    url, alice, bob = live_pair
    _, left = call(
        "POST", f"{url}/api/v1/notes/", token=alice.raw_token, body={"body": "?", "to": "bob"}
    )
    waiting = wait_in_background(url, alice.raw_token, 20)
    time.sleep(0.5)

    picked_up = time.monotonic()
    status, inbox = call("GET", f"{url}/api/v1/notes/", token=bob.raw_token)
    waiting["thread"].join(25)

    print(f"\nsent-notes wait: answered {waiting['ended'] - picked_up:.3f} s after the pickup")
    assert status == 200
    assert [n["id"] for n in inbox["notes"]] == [left["note"]["id"]]
    assert waiting["status"] == 200
    assert waiting["body"]["sent"] == []  # nothing of alice's waits any more
    assert waiting["ended"] - picked_up < 1


@pytest.mark.django_db(transaction=True)
def test_a_waiting_call_returns_as_soon_as_the_note_bounces(live_pair):
    url, alice, _ = live_pair
    AgentNameFactory(handle="dave", workspace=alice.workspace)
    note = services.note_leave(alice, to="dave", body="anyone?").note
    waiting = wait_in_background(url, alice.raw_token, 20)
    time.sleep(0.5)

    bounced_at = time.monotonic()
    services.notes_bounce(now=note.created_at + timedelta(days=8))
    waiting["thread"].join(25)

    assert waiting["status"] == 200
    assert waiting["body"]["sent"] == []
    assert waiting["ended"] - bounced_at < 1
    # The notice rides on the waiting call's own answer.
    assert [n["bounce_of"] for n in waiting["body"]["notes"]] == [note.public_id]


@pytest.mark.postgresql  # NOTIFY is PostgreSQL's
@pytest.mark.django_db(transaction=True)
def test_a_claim_tells_every_host_in_its_read_back_without_a_statement_of_its_own(
    settings, django_assert_num_queries
):
    import psycopg

    settings.PLUMB_SEEN_WRITE_INTERVAL = 3600
    workspace = WorkspaceFactory(slug="main")
    alice = SessionFactory(workspace=workspace, name="alice")
    bob = SessionFactory(workspace=workspace, name="bob")
    leave(alice, body="for bob", to="bob")
    told = f"t:{alice.name_id}"
    with psycopg.connect(**wake.postgres._listen_params("default")) as listener:
        # Pickups are a sparse kind: they go out on its own channel (common/wake/postgres.py).
        channel = psycopg.sql.Identifier(wake.postgres.channel_of(told))
        listener.execute(psycopg.sql.SQL("LISTEN {}").format(channel))
        # Authentication, the candidates, the claiming UPDATE and the read-back.
        with django_assert_num_queries(4):
            response = client_for(bob).get("/api/v1/notes/")
        heard = [n.payload for n in listener.notifies(timeout=2, stop_after=1)]

    assert len(response.json()["notes"]) == 1
    assert heard == [told]


# --- a pickup in another process of the host (SQLite's datagrams) ---------------------------
#
# Every pickup publishes its sender's sent-notes topic, and few processes hold
# a call waiting on one: a process announces that it does, and the others send
# it those publications only then (common/wake/topics.py, "sparse"). These
# play the other process with a subprocess that publishes as a claim's commit
# does, the pickup itself written without a publication (tests/hostwake.py).


class SentWait(threading.Thread):
    """``list_sent_notes(state=waiting, wait=60)`` of ``session`` on a thread of its own."""

    def __init__(self, session) -> None:
        super().__init__(daemon=True)
        self.session = session
        self.answer: tuple | None = None

    def run(self) -> None:
        try:
            self.answer = services.notes_sent_wait(self.session, state="waiting", wait=60)
        finally:
            connection.close()


def picked_up_elsewhere(note: Note, by) -> None:
    """The pickup's rows, committed with no publication: the other process publishes."""
    Note.objects.filter(pk=note.pk).update(delivered_at=timezone.now(), delivered_to=by)


@pytest.fixture
def asked(tmp_path, settings):
    """alice's note to bob, waiting; this process's wake-up files in ``tmp_path``."""
    settings.VAR_DIR = tmp_path
    workspace = WorkspaceFactory(slug="main")
    alice = SessionFactory(workspace=workspace, name="alice")
    bob = SessionFactory(workspace=workspace, name="bob")
    return alice, bob, services.note_leave(alice, to="bob", body="?").note


@pytest.mark.django_db(transaction=True)
def test_a_sent_notes_wait_asleep_is_woken_by_a_pickup_in_another_process(tmp_path, asked):
    alice, bob, note = asked

    with host_listener():
        waiter = SentWait(alice)
        with first_sleep_of(waiter) as asleep:
            waiter.start()
            assert asleep.wait(PROMPT)
        picked_up_elsewhere(note, bob)
        sender = other_process(tmp_path, [f"t:{alice.name_id}"])
        assert sender.communicate(timeout=60) == ("sent\n", None)
        waiter.join(PROMPT)  # woken, long before its 60 s are up

    assert not waiter.is_alive()
    assert waiter.answer == ([], False)  # nothing of alice's waits any more


@pytest.mark.django_db(transaction=True)
def test_a_sent_notes_wait_that_starts_after_the_other_processs_scan_sees_the_pickup(
    tmp_path, asked
):
    """The scan for listeners missed this process's announcement: the pickup it
    publishes committed before that scan, and so before the waiter's first look."""
    alice, bob, note = asked

    with host_listener():
        picked_up_elsewhere(note, bob)
        sender = other_process(tmp_path, [f"t:{alice.name_id}"], held=True)
        try:
            assert sender.stdout.readline() == "scanned\n"
            waiter = SentWait(alice)
            waiter.start()
            waiter.join(PROMPT)
            answered_while_held = not waiter.is_alive()
        finally:
            assert sender.communicate("\n", timeout=60) == ("sent\n", None)

    assert answered_while_held
    assert waiter.answer == ([], False)
