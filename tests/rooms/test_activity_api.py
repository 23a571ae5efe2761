"""``GET /api/v1/activity/`` (``wait_for_activity``) over HTTP: SPEC §3.3.

The pending notes, delivered, and the joined rooms where a message or review by
someone else sits above the caller's read position, listed and not read. The
waiting rules (wake-ups, superseding, the process bound) are exercised with
threads in ``tests/rooms/test_waiting.py``; the admin home's per-project
figures are ``tests/rooms/test_activity.py``.
"""

from __future__ import annotations

import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from common import limits
from mailbox import services as mailbox_services
from mailbox.models import Note
from rooms import services
from rooms.models import Member
from tests.conftest import assert_error, client_for

pytestmark = pytest.mark.django_db

ACTIVITY = "/api/v1/activity/"
ROOM_FIELDS = {"slug", "latest_seq", "read_seq", "unseen"}


@pytest.fixture(autouse=True)
def _no_rate_limits(settings):
    settings.PLUMB_RATE_SESSION = None


@pytest.fixture
def general(alice, bob):
    """bob creates ``general`` (seq 1), alice joins (seq 2)."""
    services.room_create(bob, slug="general")
    services.room_join(alice, "general")


def activity(session, **params):
    return client_for(session).get(ACTIVITY, params)


def read_seq(session, slug="general") -> int:
    return Member.objects.get(room__slug=slug, name=session.name).read_seq


def test_with_nothing_new_it_answers_at_once_with_no_notes_and_no_rooms(alice, general):
    response = activity(alice)

    assert response.status_code == 200
    assert response.json() == {"notes": [], "rooms": []}


def test_a_room_with_messages_from_others_is_listed_not_read(alice, bob, general):
    services.message_send(bob, "general", body="one")
    services.message_send(bob, "general", body="two")

    response = activity(alice)

    assert response.status_code == 200
    assert set(response.json()) == {"notes", "rooms"}
    assert response.json()["rooms"] == [
        {"slug": "general", "latest_seq": 4, "read_seq": 2, "unseen": 2}
    ]
    assert read_seq(alice) == 2
    # unseen is the count list_rooms shows.
    (listed,) = client_for(alice).get("/api/v1/rooms/").json()["rooms"]
    assert listed["unseen"] == 2


def test_rooms_are_listed_by_slug_and_only_those_with_news(alice, bob, general):
    for slug in ("zeta", "alpha", "quiet"):
        services.room_create(bob, slug=slug)
        services.room_join(alice, slug)
    services.message_send(bob, "zeta", body="z")
    services.message_send(bob, "alpha", body="a")

    rooms = activity(alice).json()["rooms"]

    assert [room["slug"] for room in rooms] == ["alpha", "zeta"]
    assert all(set(room) == ROOM_FIELDS for room in rooms)


def test_a_pending_note_is_delivered_once(alice, bob, general):
    left = mailbox_services.note_leave(bob, to="alice", body="psst")

    first = activity(alice)
    second = activity(alice)

    assert [note["id"] for note in first.json()["notes"]] == [left.note.public_id]
    assert first.json()["notes"][0]["body"] == "psst"
    assert first.json()["rooms"] == []
    assert second.json() == {"notes": [], "rooms": []}
    assert Note.objects.get(pk=left.note.pk).delivered_to_id == alice.pk


def test_own_messages_list_no_room(alice, general):
    services.message_send(alice, "general", body="mine")
    Member.objects.filter(name=alice.name).update(read_seq=0)

    assert activity(alice).json()["rooms"] == []


def test_a_wait_with_nothing_happening_times_out_empty(alice, general):
    started = time.monotonic()
    response = activity(alice, wait=0.2)

    assert time.monotonic() - started >= 0.2
    assert response.status_code == 200
    assert response.json() == {"notes": [], "rooms": []}


def test_a_wait_answers_at_once_when_there_is_news(alice, bob, general):
    services.message_send(bob, "general", body="news")

    started = time.monotonic()
    response = activity(alice, wait=limits.WAIT_MAX)

    assert time.monotonic() - started < limits.WAIT_MAX / 2
    assert [room["slug"] for room in response.json()["rooms"]] == ["general"]


@pytest.mark.parametrize("wait", [-1, limits.WAIT_MAX + 0.5, "soon", "nan"])
def test_an_invalid_wait_is_refused_with_validation_error(alice, bob, general, wait):
    mailbox_services.note_leave(bob, to="alice", body="stays pending")

    error = assert_error(activity(alice, wait=wait), 400, "validation_error")

    assert "wait" in error["details"]
    assert Note.objects.get().delivered_at is None  # an error delivers nothing


def test_it_needs_a_session_token(project_key):
    anonymous = APIClient().get(ACTIVITY)
    with_a_key = APIClient(headers={"Authorization": f"Bearer {project_key.raw_key}"}).get(ACTIVITY)

    assert_error(anonymous, 401, "not_authenticated")
    assert_error(with_a_key, 401, "session_token_required")


def test_the_trailing_slash_is_optional(alice, general):
    assert client_for(alice).get(ACTIVITY.rstrip("/")).json() == {"notes": [], "rooms": []}


def test_the_queries_do_not_grow_with_the_rooms_listed(alice, bob, general, settings):
    settings.PLUMB_SEEN_WRITE_INTERVAL = 3600  # no last_seen_at write in between
    services.message_send(bob, "general", body="news")

    def queries() -> tuple[int, int]:
        with CaptureQueriesContext(connection) as captured:
            response = activity(alice)
        return len(captured), len(response.json()["rooms"])

    one_room = queries()
    for index in range(5):
        services.room_create(bob, slug=f"room-{index}")
        services.room_join(alice, f"room-{index}")
        services.message_send(bob, f"room-{index}", body="news")
    six_rooms = queries()

    print(f"queries per wait_for_activity: {one_room[0]}")
    assert (one_room[1], six_rooms[1]) == (1, 6)
    assert six_rooms[0] == one_room[0]


def test_the_schema_publishes_the_operation_and_its_wait(api_client):
    schema = api_client.get("/api/v1/schema/", {"format": "json"}).json()

    operation = schema["paths"]["/api/v1/activity/"]["get"]
    assert operation["operationId"] == "wait_for_activity"
    (wait,) = [p for p in operation["parameters"] if p["name"] == "wait"]
    assert (wait["schema"]["minimum"], wait["schema"]["maximum"]) == (0, limits.WAIT_MAX)
    read = schema["paths"]["/api/v1/rooms/{slug}/messages/"]["get"]
    assert "wait" in {p["name"] for p in read["parameters"]}
