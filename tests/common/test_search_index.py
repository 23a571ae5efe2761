"""The search indexes on the database (common/search/index.py, rooms and mailbox
migrations): written in the transaction of each send and note, gone with the texts they
index, filled by the migration for texts stored before it, and finding on either
database exactly what the language means."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.search.index import QUEUE_BATCH
from common.search.query import InvalidQuery, parse
from common.search.text import words
from mailbox import services as mailbox_services
from mailbox.models import NOTE_INDEX, AgentName, Conversation, Note
from mailbox.selectors import notes_matching
from rooms import services
from rooms.errors import NotAMember
from rooms.models import MESSAGE_INDEX, Event, Message, Room
from rooms.selectors.search import messages_matching
from tests.searching import reference_matches

pytestmark = pytest.mark.django_db


def indexed_ids(index) -> set[int]:
    """Ids with a row in the index, or (SQLite) queued for it."""
    if connection.vendor == "postgresql":
        return set(_ids(f'SELECT "{index.key}" FROM "{index.table}"'))
    return set(_ids(f'SELECT rowid FROM "{index.table}"')) | queued_ids(index)


def queued_ids(index) -> set[int]:
    if connection.vendor == "postgresql":
        return set()
    return set(_ids(f'SELECT id FROM "{index.pending}"'))


def _ids(sql: str) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return [row[0] for row in cursor.fetchall()]


def found(q: str) -> set[str]:
    return set(messages_matching(Message.objects.all(), parse(q)).values_list("body", flat=True))


@pytest.fixture
def lab(alice, bob):
    services.room_create(alice, slug="lab")
    services.room_join(bob, "lab")
    return Room.objects.get(slug="lab")


def test_a_send_writes_its_index_row_and_a_refused_or_replayed_send_does_not(lab, alice, carol):
    sent = services.message_send(alice, "lab", body="the cache key", idempotency_key="k1")
    assert indexed_ids(MESSAGE_INDEX) == {sent.message.pk}

    services.message_send(alice, "lab", body="the cache key", idempotency_key="k1")
    with pytest.raises(NotAMember):
        services.message_send(carol, "lab", body="the cache key too")

    assert indexed_ids(MESSAGE_INDEX) == {sent.message.pk}
    assert found("cache") == {"the cache key"}


def test_a_note_writes_its_index_row(alice, bob):
    left = mailbox_services.note_leave(alice, body="Handing over the migration", to="bob")
    assert indexed_ids(NOTE_INDEX) == {left.note.pk}
    matching = notes_matching(Note.objects.all(), parse("handing migration"))
    assert list(matching) == [left.note]


def test_deleting_texts_deletes_their_index_rows(lab, alice, bob):
    kept = services.message_send(alice, "lab", body="kept in another room")
    services.room_create(bob, slug="doomed")
    services.message_send(bob, "doomed", body="goes with its room")
    note = mailbox_services.note_leave(alice, body="goes with its thread", to="bob").note
    other = mailbox_services.note_leave(bob, body="stays", to="alice").note

    # A retention purge deletes rows like these; the index follows by itself.
    Room.objects.filter(slug="doomed").delete()
    Conversation.objects.filter(pk=note.conversation_id).delete()

    assert indexed_ids(MESSAGE_INDEX) == {kept.message.pk}
    assert indexed_ids(NOTE_INDEX) == {other.pk}


@pytest.mark.sqlite  # the queue is SQLite's
def test_queued_words_join_the_index_in_batches_and_before_each_search(lab, alice):
    sent = [services.message_send(alice, "lab", body=f"queued {i}").message for i in range(3)]
    assert queued_ids(MESSAGE_INDEX) == {m.pk for m in sent}

    assert found("queued") == {"queued 0", "queued 1", "queued 2"}
    assert queued_ids(MESSAGE_INDEX) == set()

    # The transaction of every QUEUE_BATCH-th text moves the queue by itself.
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE sqlite_sequence SET seq = %s WHERE name = 'rooms_message'",
            [2 * QUEUE_BATCH - 2],
        )
    before = services.message_send(alice, "lab", body="queued before the batch").message
    batch = services.message_send(alice, "lab", body="queued with the batch").message
    assert batch.pk % QUEUE_BATCH == 0
    assert queued_ids(MESSAGE_INDEX) == set()
    assert {before.pk, batch.pk} <= indexed_ids(MESSAGE_INDEX)


@pytest.mark.postgresql  # TRUNCATE is PostgreSQL's
def test_truncating_the_texts_empties_their_index(lab, alice):
    services.message_send(alice, "lab", body="soon gone")
    with connection.cursor() as cursor:
        # Django's foreign keys are checked at commit: check them now, or PostgreSQL
        # refuses to truncate a table with checks pending in the transaction.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("TRUNCATE rooms_message, rooms_event, rooms_messagemention")
    assert indexed_ids(MESSAGE_INDEX) == set()


def _bulk_messages(room: Room, author: AgentName, bodies: list[str]) -> list[Message]:
    """Messages written as a bulk load or an older version would: no index rows."""
    now = timezone.now()
    room.refresh_from_db()
    start = room.head_seq
    messages = Message.objects.bulk_create(
        Message(room=room, seq=start + i, author=author, body=body, created_at=now)
        for i, body in enumerate(bodies, 1)
    )
    Event.objects.bulk_create(
        Event(room=room, seq=m.seq, kind="message", actor=author, message=m) for m in messages
    )
    Room.objects.filter(pk=room.pk).update(head_seq=start + len(bodies))
    return messages


def test_fill_indexes_every_text_without_a_row_in_batches(lab, alice):
    indexed = services.message_send(alice, "lab", body="already indexed one").message
    loaded = _bulk_messages(lab, alice.name, [f"loaded body number {i}" for i in range(5)])
    assert found("loaded") == set()

    assert MESSAGE_INDEX.fill(connection, batch=2) == 5

    assert indexed_ids(MESSAGE_INDEX) == {indexed.pk, *(m.pk for m in loaded)}
    assert len(found("loaded body")) == 5
    assert MESSAGE_INDEX.fill(connection, batch=2) == 0


@pytest.mark.django_db(transaction=True)
def test_the_migrations_index_the_history_already_stored(alice, bob):
    """An upgraded server finds what was written before the index existed."""
    services.room_create(alice, slug="old")
    before_rooms = [("rooms", "0009_people_and_policy"), ("mailbox", "0015_people_and_policy")]
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes()
    try:
        executor.migrate(before_rooms)
        tables = connection.introspection.table_names()
        assert MESSAGE_INDEX.table not in tables
        assert NOTE_INDEX.table not in tables
        room = Room.objects.get(slug="old")
        _bulk_messages(room, alice.name, ["Décision: the cache key includes the tenant"])
        conversation = Conversation.objects.create(cap=20, notes_count=1, last_position=1)
        Note.objects.create(
            conversation=conversation,
            position=1,
            sender_name=alice.name,
            recipient=bob.name,
            body="an old note about the tenant",
            delivery="name",
        )

        executor = MigrationExecutor(connection)
        executor.migrate(latest)
    finally:
        MigrationExecutor(connection).migrate(latest)

    assert found("decision tenant") == {"Décision: the cache key includes the tenant"}
    assert list(
        notes_matching(Note.objects.all(), parse("tenant")).values_list("body", flat=True)
    ) == ["an old note about the tenant"]


# --- the two databases find the same --------------------------------------------------------

CORPUS = [
    "the cache key must include the tenant",
    "Cache-key rotation: deploy on Friday",
    "café au lait, naïve façade",
    "NEAR the column: col value AND more",
    "deployment deployed deploys",
    "日本語のテキスト",
    "it's O'Reilly's \\ backslash",
    "nothing to see here",
]
VOCABULARY = [
    "cache", "key", "tenant", "deploy", "deploy*", "café", "cafe", "naive", "façade",
    "near", "col:", "and", "NOT", "日本", "テキスト", "o'reilly", "it's", "\\", "the",
    "dep*", "deplo*", "-cache", "-the", '"cache key"', '"the tenant"', '-"cache key"',
]  # fmt: skip


@pytest.fixture
def corpus(lab, alice):
    for body in CORPUS:
        services.message_send(alice, "lab", body=body)
    return CORPUS


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=4).map(" ".join))
def test_the_database_finds_exactly_what_the_query_means(corpus, q):
    try:
        query = parse(q)
    except InvalidQuery:
        return
    expected = {body for body in corpus if reference_matches(words(body), query)}
    assert found(q) == expected


def test_a_hostile_query_is_plain_words_to_the_database(corpus):
    for q in ["NEAR(cache key)", "col: value", "cache OR tenant", "{document}: cache", "'; --"]:
        try:
            query = parse(q)
        except InvalidQuery:
            continue
        expected = {body for body in corpus if reference_matches(words(body), query)}
        assert found(q) == expected, q
