"""Calls to the room message endpoints, and the state a refused call must leave as it was.

Shared by the message, mention and read-position API tests of ``tests/rooms``. Most of
them run in the room ``general`` of ``tests/rooms/conftest.py``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import datetime

from django.utils import timezone

from mailbox.models import Project, room_flood_limit_default
from rooms.models import Event, Member, Message, MessageMention, Room
from tests.conftest import client_for

ROOMS = "/api/v1/rooms/"
MENTIONS = "/api/v1/mentions/"
GITHUB_TOKEN = "ghp_" + "a1B2c3D4e5" * 4
REDACTED = "[REDACTED:github_token]"


@contextlib.contextmanager
def flood_limit_lifted(project_id: int) -> Iterator[None]:
    """Seeding posts faster than the default flood limit allows: lifted meanwhile."""
    project = Project.objects.filter(pk=project_id)
    project.update(room_flood_limit=0)
    try:
        yield
    finally:
        project.update(room_flood_limit=room_flood_limit_default())


SEND_FIELDS = {
    "message",
    "latest_seq",
    "unseen_before_send",
    "mentions",
    "unresolved_mentions",
    "mention_warnings",
    "scrubbed",
    "notes",
    "replayed",
}
MESSAGE_FIELDS = {
    "id",
    "seq",
    "room",
    "author",
    "body",
    "reply_to",
    "mentions",
    "created_at",
    "hidden",
}
EVENT_FIELDS = {"seq", "kind", "created_at", "actor", "message", "review", "moderation"}


# Each 11-byte line grows to 39 bytes once scrubbed ("-p[REDACTED:password_assignment]").
GROWING_BODY = "mysql -px9\n" * 500
GROWN_BYTES = len("mysql -p[REDACTED:password_assignment]\n") * 500


def create_room(session, slug, **fields):
    return client_for(session).post(ROOMS, {"slug": slug, **fields}, format="json")


def join(session, slug="general", **body):
    return client_for(session).post(f"{ROOMS}{slug}/join", body, format="json")


def leave(session, slug="general"):
    return client_for(session).post(f"{ROOMS}{slug}/leave", {}, format="json")


def send(session, slug="general", **body):
    return client_for(session).post(f"{ROOMS}{slug}/messages/", body, format="json")


def post(session, body: str, slug="general", **fields) -> dict:
    """Send and return the message; the send must succeed."""
    response = send(session, slug, body=body, **fields)
    assert response.status_code == 201, response.content
    return response.json()["message"]


def read(session, slug="general", **params):
    return client_for(session).get(f"{ROOMS}{slug}/messages/", params)


def review(session, message_id, slug="general", **body):
    return client_for(session).post(
        f"{ROOMS}{slug}/messages/{message_id}/reviews/", body, format="json"
    )


def mentions_of(session, **params):
    return client_for(session).get(MENTIONS, params)


def read_seq(session, slug="general") -> int:
    return Member.objects.get(room__slug=slug, name=session.name).read_seq


def head_seq(slug="general") -> int:
    return Room.objects.get(slug=slug).head_seq


def stored_state() -> tuple:
    """Everything a refused call must leave as it was."""
    return (
        list(Room.objects.order_by("slug").values_list("slug", "head_seq", "locked_at")),
        list(
            Member.objects.order_by("pk").values_list(
                "room__slug", "name__handle", "read_seq", "left_at", "muted_at"
            )
        ),
        list(Event.objects.order_by("pk").values_list("room__slug", "seq", "kind")),
        list(Message.objects.order_by("pk").values_list("public_id", "body", "idempotency_key")),
        MessageMention.objects.count(),
    )


def seed_messages(session, count: int, slug="general") -> list[Message]:
    """``count`` messages by ``session`` in bulk, numbered as message_send numbers them."""
    room = Room.objects.get(slug=slug)
    start = room.head_seq
    before = Message.objects.filter(room=room).count()
    own_before = Message.objects.filter(room=room, author=session.name).count()
    now = timezone.now()
    messages = Message.objects.bulk_create(
        Message(
            room=room,
            seq=start + i,
            ordinal=before + i,
            author_ordinal=own_before + i,
            author=session.name,
            body=f"seeded {i}",
            created_at=now,
        )
        for i in range(1, count + 1)
    )
    Event.objects.bulk_create(
        Event(
            room=room,
            seq=m.seq,
            kind=Event.Kind.MESSAGE,
            actor=session.name,
            message=m,
            created_at=now,
        )
        for m in messages
    )
    Room.objects.filter(pk=room.pk).update(head_seq=start + count)
    return messages


def is_iso_utc(value: str) -> bool:
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed.utcoffset() is not None and parsed.utcoffset().total_seconds() == 0
