"""``GET /api/v1/notes/`` (check_messages): delivery oldest first, ``wait``, and a fixed
number of queries (SPEC §3.3).
"""

import threading
import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from mailbox.models import Note
from tests.factories import SessionFactory
from tests.mailbox.notes import assert_refused, check, ids, leave

pytestmark = pytest.mark.django_db


def test_check_messages_delivers_oldest_first_and_marks_each_note_delivered(alice, bob, carol):
    sent = [
        leave(alice, body="one", to="bob").json()["note"]["id"],
        leave(carol, body="two", to="bob").json()["note"]["id"],
        leave(alice, body="three", to="bob").json()["note"]["id"],
    ]

    response = check(bob)

    assert response.status_code == 200
    assert set(response.json()) == {"notes"}
    assert ids(response.json()["notes"]) == sent
    assert [n["body"] for n in response.json()["notes"]] == ["one", "two", "three"]
    for note in Note.objects.filter(public_id__in=sent):
        assert note.delivered_at is not None
        assert note.delivered_to == bob
    assert check(bob).json() == {"notes": []}


@pytest.mark.parametrize("wait", ["31", "30.5", "-1", "-0.1", "abc", "nan", "inf"])
def test_check_messages_refuses_a_wait_that_is_not_a_number_from_0_to_30(bob, wait):
    response = check(bob, wait=wait)

    assert_refused(response, 400, "validation_error")
    assert "wait" in response.json()["error"]["details"]


def test_check_messages_with_wait_returns_an_empty_list_when_nothing_arrives(bob):
    response = check(bob, wait="0.2")

    assert response.status_code == 200
    assert response.json() == {"notes": []}


def test_check_messages_with_wait_returns_at_once_when_a_note_is_already_pending(alice, bob):
    note_id = leave(alice, body="ping", to="bob").json()["note"]["id"]

    started = time.monotonic()
    response = check(bob, wait="30")
    elapsed = time.monotonic() - started

    assert response.status_code == 200
    assert ids(response.json()["notes"]) == [note_id]
    assert elapsed < 10


@pytest.mark.django_db(transaction=True)
def test_check_messages_with_wait_returns_as_soon_as_a_note_arrives(workspace):
    alice = SessionFactory(workspace=workspace, name="alice")
    bob = SessionFactory(workspace=workspace, name="bob")

    def send_later() -> None:
        try:
            time.sleep(0.3)
            leave(alice, body="arrived while you waited", to="bob")
        finally:
            connection.close()  # this thread's own connection

    sender = threading.Thread(target=send_later)
    started = time.monotonic()
    sender.start()
    try:
        response = check(bob, wait="20")
    finally:
        sender.join(timeout=30)
    elapsed = time.monotonic() - started

    assert response.status_code == 200
    assert [n["body"] for n in response.json()["notes"]] == ["arrived while you waited"]
    assert elapsed < 10
    assert Note.objects.get().delivered_to == bob


def test_check_messages_runs_a_fixed_number_of_queries_however_many_notes_are_pending(
    alice, bob, carol
):
    leave(alice, body="one", to="bob")
    with CaptureQueriesContext(connection) as one:
        assert len(check(bob).json()["notes"]) == 1
    for i in range(4):
        leave(carol, body=f"more {i}", to="bob")
    with CaptureQueriesContext(connection) as four:
        assert len(check(bob).json()["notes"]) == 4

    assert len(four) == len(one)
