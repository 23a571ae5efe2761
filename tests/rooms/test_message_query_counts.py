"""Query counts of the hot room endpoints: a send, a read of 50 events and a require_read
refusal run the same queries in a room of 3 members and 5 events as in one of 30 members
and 200 events."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from rooms import services
from tests.factories import SessionFactory
from tests.rooms.messaging import flood_limit_lifted, head_seq, read, send

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("_no_rate_limits")]


# On PostgreSQL the statement that locks the room reads the figures too, and reads them
# again only when they predate the lock (a send that waited: rooms/services/sending.py);
# here nobody else holds the room.
# The message insert, its row in the search index, the head update and the event insert: on
# PostgreSQL one statement, which also carries the event's wake-up, a NOTIFY that other
# hosts hear of exactly at the commit (common.prepared.Writes, common/wake/); on SQLite
# four, and the wake-up is sent after the commit.
WRITES = 4 if connection.vendor == "sqlite" else 1
# Authentication (which also finds no note pending), the room locked with the caller's
# membership and the unseen figures, the idempotency look-up, members for mentions, the
# writes, mention insert (and the test transaction's savepoint pair).
SEND_QUERIES = 7 + WRITES
# Authentication, the room with the caller's membership, the page of events, read position
# update.
READ_QUERIES = 4
# Authentication, the room locked with the caller's membership and figures, the unseen page
# and its count (and savepoints).
REFUSAL_QUERIES = 7


def seed_room(slug: str, *, members: int, events: int, workspace) -> list:
    """A room with ``members`` members and ``events`` events, made through the services:
    joins, messages with mentions, replies and reviews."""
    with flood_limit_lifted(workspace.project_id):
        return _seed_room(slug, members=members, events=events, workspace=workspace)


def _seed_room(slug: str, *, members: int, events: int, workspace) -> list:
    sessions = [SessionFactory(workspace=workspace, name=f"{slug}-m{i}") for i in range(members)]
    services.room_create(sessions[0], slug=slug)
    for session in sessions[1:]:
        services.room_join(session, slug)
    previous = None
    for seq in range(members + 1, events + 1):
        author = sessions[seq % members]
        if previous is not None and previous.seq % 5 == 0:
            services.review_add(author, slug, previous.public_id, verdict="approve", body="ok")
            previous = None
            continue
        previous = services.message_send(
            author,
            slug,
            body=f"@{sessions[0].name.handle} see @{sessions[-1].name.handle}",
            reply_to=previous.public_id if previous is not None else None,
        ).message
    assert head_seq(slug) == events
    return sessions


def queries_of(call) -> tuple[int, object]:
    with CaptureQueriesContext(connection) as queries:
        response = call()
    return len(queries), response


@pytest.fixture
def small_and_big_rooms(workspace, settings):
    settings.PLUMB_SEEN_WRITE_INTERVAL = 3600  # no last_seen_at write, however long seeding takes
    small = seed_room("small", members=3, events=5, workspace=workspace)
    big = seed_room("big", members=30, events=200, workspace=workspace)
    return small, big


def test_sending_runs_the_same_queries_in_small_and_big_rooms(
    small_and_big_rooms, django_assert_max_num_queries
):
    small, big = small_and_big_rooms

    def send_in(sessions, slug):
        body = " ".join(f"@{s.name.handle}" for s in sessions) + " status?"
        return lambda: send(sessions[1], slug, body=body, after_seq=0, idempotency_key="q")

    with django_assert_max_num_queries(SEND_QUERIES):
        small_count, small_reply = queries_of(send_in(small, "small"))
    with django_assert_max_num_queries(SEND_QUERIES):
        big_count, big_reply = queries_of(send_in(big, "big"))

    assert small_reply.status_code == big_reply.status_code == 201
    print(f"\nqueries per send_message: {small_count}")
    assert len(big_reply.json()["mentions"]) == 30
    assert big_count == small_count


def test_reading_50_events_runs_the_same_queries_in_small_and_big_rooms(
    small_and_big_rooms, django_assert_max_num_queries
):
    small, big = small_and_big_rooms

    with django_assert_max_num_queries(READ_QUERIES):
        small_count, small_reply = queries_of(lambda: read(small[1], "small", after_seq=0))
    with django_assert_max_num_queries(READ_QUERIES):
        big_count, big_reply = queries_of(lambda: read(big[1], "big", after_seq=100))

    print(f"\nqueries per read_messages: {small_count}")
    assert len(small_reply.json()["events"]) == 5
    assert len(big_reply.json()["events"]) == 50
    assert {e["kind"] for e in big_reply.json()["events"]} == {"message", "review"}
    assert any(e["message"] and e["message"]["reply_to"] for e in big_reply.json()["events"])
    assert big_count == small_count


def test_a_require_read_refusal_runs_the_same_queries_in_small_and_big_rooms(
    small_and_big_rooms, django_assert_max_num_queries
):
    small, big = small_and_big_rooms

    with django_assert_max_num_queries(REFUSAL_QUERIES):
        small_count, small_reply = queries_of(
            lambda: send(small[1], "small", body="claim", after_seq=0, require_read=True)
        )
    with django_assert_max_num_queries(REFUSAL_QUERIES):
        big_count, big_reply = queries_of(
            lambda: send(big[1], "big", body="claim", after_seq=0, require_read=True)
        )

    print(f"\nqueries per require_read refusal: {small_count}")
    assert small_reply.status_code == big_reply.status_code == 409
    assert len(big_reply.json()["error"]["details"]["unseen"]) == 50
    assert big_count == small_count
