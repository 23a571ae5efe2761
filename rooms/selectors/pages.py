"""A page of a room's events, read as plain records rather than model instances.

``read_messages`` returns up to 500 events, each with its actor, its message,
the message's author and the message it replies to. As model instances that
is five per event with every column converted, which would be most of the
call's CPU; so one query compiled once per process (``common.prepared``)
reads only the columns the representation shows, into slotted records that
carry the same attribute names as ``Event``, ``Message`` and ``AgentName``,
so that ``rooms.representation.event_json`` renders either. They are
read-only: a caller that needs to change an event loads the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Case, F, JSONField, When

from common.prepared import Prepared
from rooms.models import Event, Room


@dataclass(slots=True)
class PageName:
    """An actor or author: the ``AgentName`` columns an event shows."""

    pk: int
    handle: str
    kind: str


@dataclass(slots=True)
class PageReplyTo:
    pk: int
    public_id: str


@dataclass(slots=True)
class PageMessage:
    pk: int
    public_id: str
    room: Room
    seq: int
    author: PageName
    author_display_name: str
    body: str
    reply_to: PageReplyTo | None
    mentions: list[dict[str, Any]]
    created_at: datetime
    hidden_at: datetime | None

    @property
    def room_id(self) -> int:
        return self.room.pk

    @property
    def reply_to_id(self) -> int | None:
        return self.reply_to.pk if self.reply_to is not None else None

    @property
    def hidden(self) -> bool:
        return self.hidden_at is not None


@dataclass(slots=True)
class PageEvent:
    pk: int
    room: Room
    seq: int
    kind: str
    created_at: datetime
    actor: PageName | None
    actor_display_name: str
    message: PageMessage | None
    verdict: str
    body: str
    data: dict[str, Any]  # a moderation event's; empty for the others, which show none

    @property
    def room_id(self) -> int:
        return self.room.pk

    @property
    def actor_id(self) -> int | None:
        return self.actor.pk if self.actor is not None else None

    @property
    def message_id(self) -> int | None:
        return self.message.pk if self.message is not None else None


_COLUMNS = (
    # the event
    "id",
    "seq",
    "kind",
    "created_at",
    "actor_id",
    "actor__handle",
    "actor__kind",
    "actor_display_name",
    "verdict",
    "body",
    "moderation_data",
    # its message, if any, with the author and the message it replies to
    "message_id",
    "message__public_id",
    "message__seq",
    "message__author_id",
    "message__author__handle",
    "message__author__kind",
    "message__author_display_name",
    "message__body",
    "message__reply_to_id",
    "message__reply_to__public_id",
    "message__mentions",
    "message__created_at",
    "message__hidden_at",
)


def _page_query(room_id: Any, after_seq: Any, limit: int, kinds: list[str] | None = None):
    events = Event.objects.filter(room_id=room_id, seq__gt=after_seq).annotate(
        # Only a moderation event shows its data: the others' is not decoded.
        moderation_data=Case(
            When(kind=Event.Kind.MODERATION, then=F("data")), output_field=JSONField()
        )
    )
    if kinds:
        events = events.filter(kind__in=kinds)
    return events.order_by("seq").values_list(*_COLUMNS)[:limit]


# The ORM writes LIMIT into the SQL text, so each page size is compiled once;
# a size is at most limits.LIST_MAX + 1, so there are few of them.
_pages: dict[int, Prepared] = {}


def _page_rows(room_id: int, after_seq: int, limit: int) -> list[list[Any]]:
    prepared = _pages.get(limit)
    if prepared is None:
        prepared = _pages.setdefault(
            limit,
            Prepared(
                lambda room_id, after_seq: _page_query(room_id, after_seq, limit),
                params=["room_id", "after_seq"],
            ),
        )
    return prepared.rows(room_id=room_id, after_seq=after_seq)


def _record(room: Room, row: list[Any]) -> PageEvent:
    (pk, seq, kind, created_at, actor_id, actor_handle, actor_kind, actor_display_name, verdict,
     body, data, message_id, public_id, message_seq, author_id, author_handle, author_kind,
     author_display_name, message_body, reply_to_id, reply_to_public_id, mentions,
     message_created_at, hidden_at) = row  # fmt: skip
    message = None
    if message_id is not None:
        message = PageMessage(
            pk=message_id,
            public_id=public_id,
            room=room,
            seq=message_seq,
            author=PageName(pk=author_id, handle=author_handle, kind=author_kind),
            author_display_name=author_display_name,
            body=message_body,
            reply_to=(
                PageReplyTo(pk=reply_to_id, public_id=reply_to_public_id)
                if reply_to_id is not None
                else None
            ),
            mentions=mentions,
            created_at=message_created_at,
            hidden_at=hidden_at,
        )
    return PageEvent(
        pk=pk,
        room=room,
        seq=seq,
        kind=kind,
        created_at=created_at,
        actor=(
            PageName(pk=actor_id, handle=actor_handle, kind=actor_kind)
            if actor_id is not None
            else None
        ),
        actor_display_name=actor_display_name,
        message=message,
        verdict=verdict,
        body=body,
        data=data if data is not None else {},
    )


def events_page(
    room: Room, *, after_seq: int, limit: int, kinds: list[str] | None
) -> tuple[list[PageEvent], bool]:
    """Events of ``room`` with seq above ``after_seq``, ascending, at most ``limit``;
    and whether more follow."""
    if kinds:
        # Filtered reads are rarer, and their lists vary: the ORM builds each.
        rows = [list(row) for row in _page_query(room.pk, after_seq, limit + 1, kinds)]
    else:
        rows = _page_rows(room.pk, after_seq, limit + 1)
    page = [_record(room, row) for row in rows[:limit]]
    return page, len(rows) > limit
