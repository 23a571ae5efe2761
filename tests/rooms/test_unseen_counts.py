"""Unseen counts come from message ordinals; they must equal a plain count, always."""

from __future__ import annotations

import random

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.models import Count

from rooms import services
from rooms.models import Event, Message, Room
from rooms.selectors import others_messages_after, room_list_for_session
from tests.factories import SessionFactory


def _counted(room: Room, author_id: int, seq: int) -> int:
    return (
        Event.objects.filter(room=room, kind=Event.Kind.MESSAGE, seq__gt=seq)
        .exclude(actor_id=author_id)
        .count()
    )


def _from_ordinals(room: Room, author_id: int, seq: int) -> int:
    return (
        Room.objects.filter(pk=room.pk)
        .annotate(n=others_messages_after(room.pk, author_id, seq))
        .values_list("n", flat=True)
        .get()
    )


@pytest.fixture
def busy_room(workspace):
    """Three authors, joins, a leave and a rejoin, reviews and a hidden message, shuffled."""
    rng = random.Random(7)
    ann, ben, cy = (SessionFactory(workspace=workspace, name=n) for n in ("ann", "ben", "cy"))
    services.room_create(ann, slug="busy")
    services.room_join(ben, "busy")
    sent = []
    for step in range(60):
        if step == 10:
            services.room_join(cy, "busy")
        elif step == 30:
            services.room_leave(cy, "busy")
        elif step == 35:
            services.room_join(cy, "busy")
        cy_is_in = 10 <= step < 30 or step >= 35
        author = rng.choice([ann, ben, ben, cy] if cy_is_in else [ann, ben])
        sent.append(services.message_send(author, "busy", body=f"message {step}").message)
        if step % 9 == 4:
            services.review_add(ann, "busy", sent[-1].public_id, verdict="comment", body="ok")
    services.message_hide(sent[3], actor="admin:ops", reason="noise")
    return Room.objects.get(slug="busy"), (ann, ben, cy)


def test_the_ordinals_count_what_a_plain_count_counts_after_every_seq(busy_room):
    room, sessions = busy_room

    for session in sessions:
        for seq in range(0, room.head_seq + 1):
            assert _from_ordinals(room, session.name_id, seq) == _counted(
                room, session.name_id, seq
            ), (session.name.handle, seq)


def test_a_send_reports_the_plain_count_for_any_after_seq(busy_room):
    room, (_, ben, _) = busy_room
    for after_seq in (0, 1, room.head_seq // 2, room.head_seq - 1, room.head_seq):
        expected = _counted(room, ben.name_id, after_seq)

        sent = services.message_send(ben, "busy", body=f"after {after_seq}", after_seq=after_seq)

        assert sent.unseen_before_send == expected
        room.refresh_from_db()


def test_new_messages_continue_both_ordinals(busy_room):
    room, (ann, _, _) = busy_room
    before = Message.objects.filter(room=room).count()
    own_before = Message.objects.filter(room=room, author=ann.name).count()

    message = services.message_send(ann, "busy", body="one more").message

    stored = Message.objects.get(pk=message.pk)
    assert (stored.ordinal, stored.author_ordinal) == (before + 1, own_before + 1)


def test_list_rooms_counts_unseen_messages_from_the_ordinals(busy_room):
    room, sessions = busy_room
    for session in sessions:
        (listed,) = [r for r in room_list_for_session(session)[0] if r.slug == "busy"]
        member = room.members.get(name=session.name)

        assert listed.my_unseen == _counted(room, session.name_id, member.read_seq)


@pytest.mark.django_db(transaction=True)
def test_the_migration_numbers_messages_already_stored(workspace):
    before, after = (
        [("rooms", "0003_moderators_group")],
        [("rooms", "0004_indexes_and_message_ordinals")],
    )
    ann, ben = (SessionFactory(workspace=workspace, name=n) for n in ("ann", "ben"))
    services.room_create(ann, slug="old")
    services.room_join(ben, "old")
    services.room_create(ben, slug="other")
    for i in range(25):
        services.message_send([ann, ben, ben][i % 3], "old", body=f"old {i}")
        if i % 4 == 0:
            services.message_send(ben, "other", body=f"other {i}")
    expected = list(Message.objects.order_by("pk").values_list("pk", "ordinal", "author_ordinal"))
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    executor.loader.build_graph()
    executor.migrate(after)
    try:
        numbered = list(
            Message.objects.order_by("pk").values_list("pk", "ordinal", "author_ordinal")
        )
    finally:
        # Every later test of the run needs the tables as the latest migrations leave them.
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
    assert numbered == expected
    assert Message.objects.aggregate(n=Count("pk"))["n"] == 32
