"""Messages and events are built as plain dicts (rooms/api/serializers.py): these
tests hold each one to the fields its serializer declares for the schema, in the
same order, and to the bytes DRF's own field machinery renders for the same row.

The room ``general`` holds one event of every kind: joins, a leave, a plain
message, a reply with mentions, a review of each verdict, and moderation of a
message (hidden), of a member (muted) and of the room (locked, unlocked).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import hypothesis
import pytest
from hypothesis import given
from hypothesis import strategies as st
from rest_framework import serializers
from rest_framework.renderers import JSONRenderer

from mailbox.representation import timestamp
from rooms import representation as r
from rooms import services
from rooms.api.serializers import (
    AuthorSerializer,
    EventSerializer,
    MessageSerializer,
    ModerationSerializer,
    PersonSerializer,
    ReviewSerializer,
)
from rooms.models import Event, Member, Message
from rooms.selectors import with_event_relations
from tests.conftest import client_for

pytestmark = pytest.mark.django_db


def drf(serializer: serializers.Serializer, instance: object) -> dict:
    """What DRF's generic per-field machinery makes of ``instance``."""
    return serializers.Serializer.to_representation(serializer, instance)


def rendered(data: object) -> bytes:
    return JSONRenderer().render(data)


def fields(serializer_class: type[serializers.Serializer]) -> list[str]:
    return list(serializer_class().fields)


@pytest.fixture
def general(alice, bob, carol) -> list[Event]:
    """Every event of ``general``, read back through events_read (mark_read off)."""
    room = services.room_create(bob, slug="general", display_name="Bob\u200b").room
    services.room_join(alice, "general", display_name="Alice")
    services.room_join(carol, "general", display_name="")
    first = services.message_send(bob, "general", body="first").message
    services.message_send(
        alice, "general", body="@bob @carol @nobody agreed", reply_to=first.public_id
    )
    services.review_add(alice, "general", first.public_id, verdict="approve", body="fine")
    services.review_add(alice, "general", first.public_id, verdict="request_changes", body="no")
    services.review_add(carol, "general", first.public_id, verdict="comment")
    services.message_hide(first, actor="op", reason="spam")
    services.member_mute(Member.objects.get(room=room, name=carol.name), actor="op", reason="x")
    services.room_lock(room, actor="op", reason="maintenance")
    services.room_unlock(room, actor="op")
    services.room_leave(alice, "general")
    return services.events_read(bob, "general", after_seq=0, limit=500, mark_read=False).events


def test_the_room_holds_every_event_kind_and_verdict(general):
    assert {e.kind for e in general} == set(Event.Kind.values)
    assert {e.verdict for e in general if e.kind == Event.Kind.REVIEW} == set(Event.Verdict.values)
    messages = [e.message for e in general if e.kind == Event.Kind.MESSAGE]
    assert [m.hidden for m in messages] == [True, False]
    assert messages[1].reply_to_id == messages[0].pk
    assert [m["handle"] for m in messages[1].mentions] == ["bob", "carol"]
    assert any(e.actor_id is None for e in general)


def test_every_event_has_its_serializers_fields_in_order_and_drfs_bytes(general):
    for event in general:
        out = r.event_json(event)
        assert list(out) == fields(EventSerializer), event.kind
        assert rendered(out) == rendered(drf(EventSerializer(), event)), event.kind
        assert rendered(EventSerializer(event).data) == rendered(out)


def test_every_message_has_its_serializers_fields_in_order_and_drfs_bytes(general):
    messages = [e.message for e in general if e.message_id is not None]
    assert messages
    for message in messages:
        out = r.message_json(message)
        assert list(out) == fields(MessageSerializer)
        assert rendered(out) == rendered(drf(MessageSerializer(), message))
        for person in out["mentions"]:
            assert list(person) == fields(PersonSerializer)


def test_every_review_has_its_serializers_fields_in_order_and_drfs_bytes(general):
    reviews = [e for e in general if e.kind == Event.Kind.REVIEW]
    for event in reviews:
        out = r.review_json(event)
        assert list(out) == fields(ReviewSerializer)
        assert rendered(out) == rendered(drf(ReviewSerializer(), event))
    assert [r.review_json(e)["body"] for e in reviews] == ["fine", "no", None]


def test_every_moderation_has_its_serializers_fields_in_order(general):
    moderations = [e for e in general if e.kind == Event.Kind.MODERATION]
    assert [e.data["action"] for e in moderations] == ["hide", "mute", "lock", "unlock"]
    for event in moderations:
        out = r.moderation_json(event)
        assert list(out) == fields(ModerationSerializer)
        assert rendered(out) == rendered(drf(ModerationSerializer(), out))


def test_every_actor_and_author_matches_the_author_serializer_and_is_an_agent(general):
    for event in general:
        if event.actor_id is None:
            continue
        person = {
            "handle": event.actor.handle,
            "display_name": event.actor_display_name,
            "kind": "agent",
        }
        out = r.event_json(event)["actor"]
        assert list(out) == fields(AuthorSerializer)
        assert rendered(out) == rendered(drf(AuthorSerializer(), person))
        if event.kind == Event.Kind.MESSAGE:
            assert r.message_json(event.message)["author"]["kind"] == "agent"
    assert r.event_json(general[0])["actor"]["display_name_visible"] == "Bob<U+200B>"


def test_a_page_read_without_room_joins_renders_like_one_with_them(general):
    """events_page takes the room it already has instead of joining it per row."""
    joined = list(with_event_relations(Event.objects.filter(room=general[0].room_id)))
    assert rendered([r.event_json(e) for e in general]) == rendered(
        [drf(EventSerializer(), e) for e in joined]
    )


def test_read_messages_answers_what_drf_renders(general, bob):
    response = client_for(bob).get("/api/v1/rooms/general/messages/?after_seq=0&mark_read=false")
    assert response.status_code == 200
    joined = with_event_relations(Event.objects.filter(room=general[0].room_id))
    assert response.json()["events"] == [drf(EventSerializer(), e) for e in joined]


def test_a_sent_message_renders_like_the_stored_one(general, bob):
    sent = services.message_send(bob, "general", body="@carol again")
    stored = Message.objects.select_related("room", "author", "reply_to").get(pk=sent.message.pk)
    assert rendered(r.message_json(sent.message)) == rendered(drf(MessageSerializer(), stored))
    body = r.message_sent_body(sent)
    assert rendered(body["message"]) == rendered(drf(MessageSerializer(), sent.message))


@pytest.mark.parametrize(
    "when",
    [
        datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC),
        datetime(2026, 3, 1, 12, 0, 0, 7, tzinfo=UTC),
        datetime(2026, 3, 1, 1, 30, 0, 123456, tzinfo=timezone(timedelta(hours=5))),
        datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone(timedelta(hours=-8))),
        datetime(999, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
        datetime(1000, 1, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(2026, 3, 1, 12, 0, 0, tzinfo=ZoneInfo("UTC")),
    ],
)
def test_timestamps_are_formatted_as_drfs_datetime_field_does(when):
    assert timestamp(when) == serializers.DateTimeField().to_representation(when)


@hypothesis.settings(max_examples=300, deadline=None)
@given(
    when=st.datetimes(
        min_value=datetime(1, 1, 2),  # noqa: DTZ001 - hypothesis adds the zone
        timezones=st.sampled_from([UTC, ZoneInfo("UTC"), timezone(timedelta(hours=-3))]),
    )
)
def test_any_timestamp_is_formatted_as_drfs_datetime_field_does(when):
    assert timestamp(when) == serializers.DateTimeField().to_representation(when)


def test_another_datetime_format_is_drfs_too(settings):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DATETIME_FORMAT": "%Y-%m-%d %H:%M"}
    when = datetime(2026, 3, 1, 12, 0, 0, 7, tzinfo=UTC)
    expected = "2026-03-01 12:00"

    assert timestamp(when) == serializers.DateTimeField().to_representation(when) == expected
