"""Membership of rooms: create (the creator joins), join and leave.

Each is a ``join`` or ``leave`` event taken under the room row lock
(``rooms.services.stream``), so a join and a send or a leave racing in one
room get distinct, gap-free seqs and the member row matches the last event.

A room's title and topic and a member's display name are scrubbed of secrets
before they are stored, like message bodies (SPEC §3.5): every member reads
them, and the join event carries the display name into the room's history.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import IntegrityError, transaction
from django.utils import timezone

from common import limits
from common.bodies import scrubbed_merge, text_prepare
from common.errors import ValidationFailed
from common.pause import pause_point
from mailbox.models import AgentName, AuthorKind, Session
from mailbox.selectors import optin_allows
from mailbox.services.identity import slug_check
from rooms.errors import RoomCrossProjectRefused, RoomExists
from rooms.models import Event, Member, Room
from rooms.services.stream import append_event, current_member, display_name_prepare, lock_room


@dataclass
class Created:
    room: Room
    event: Event
    # What was redacted from the title, topic and display name, as sends report it.
    scrubbed: list[dict] = field(default_factory=list)


def room_create(
    session: Session, *, slug: str, title: str = "", topic: str = "", display_name: str = ""
) -> Created:
    """Create a room in the caller's project; the creator joins (its seq 1 event).

    The title, topic and display name are stored scrubbed of secrets.
    Raises ``validation_error`` and ``room_exists``.
    """
    slug_check(slug)
    if not isinstance(title, str) or len(title) > limits.ROOM_TITLE_MAX:
        raise ValidationFailed.field(
            "title", "Too long.", f"title is at most {limits.ROOM_TITLE_MAX} characters."
        )
    if not isinstance(topic, str) or len(topic) > limits.ROOM_TOPIC_MAX:
        raise ValidationFailed.field(
            "topic", "Too long.", f"topic is at most {limits.ROOM_TOPIC_MAX} characters."
        )
    scrubbed_title = text_prepare(title, field="title", max_length=limits.ROOM_TITLE_MAX)
    scrubbed_topic = text_prepare(topic, field="topic", max_length=limits.ROOM_TOPIC_MAX)
    scrubbed_name = display_name_prepare(display_name)
    try:
        with transaction.atomic(durable=True):
            now = timezone.now()
            room = Room.objects.create(
                slug=slug,
                project=session.workspace.project,
                title=scrubbed_title.text,
                topic=scrubbed_topic.text,
                created_by=session.name,
                created_at=now,
            )
            event = _join(room, session.name, display_name=scrubbed_name.text, now=now)
    except IntegrityError:
        raise RoomExists(f"A room named {slug!r} already exists.") from None
    return Created(
        room=room,
        event=event,
        scrubbed=scrubbed_merge(scrubbed_title, scrubbed_topic, scrubbed_name),
    )


def _join(room: Room, name: AgentName, *, display_name: str, now) -> Event:
    event = append_event(
        room, kind=Event.Kind.JOIN, actor=name, actor_display_name=display_name, created_at=now
    )
    # A new member has seen the room up to its own join: earlier history stays
    # readable (after_seq=0) but does not count as unread.
    Member.objects.update_or_create(
        room=room,
        name=name,
        defaults={
            "display_name": display_name,
            "left_at": None,
            "joined_at": now,
            "read_seq": event.seq,
        },
    )
    return event


@dataclass
class Joined:
    room: Room
    member: Member
    event: Event | None  # None when the caller was a member already
    # What was redacted from the display name given, as sends report it (a
    # join that changes nothing reports it too, as a replayed send does).
    scrubbed: list[dict] = field(default_factory=list)


def room_join(session: Session, slug: str, *, display_name: str | None = None) -> Joined:
    """Join a room (a ``join`` event); joining again changes nothing.

    A display name given is stored scrubbed of secrets. A room of another
    project may be joined only if that project opted in to the caller's; a
    person (``mailbox.services.people``) may join any room, as staff of the
    whole server (SPEC §5.1). Raises ``room_not_found``,
    ``cross_project_refused`` and ``validation_error``.

    The opt-in is checked under the room row lock, which an opt-in's
    revocation takes too, on every room of the project, before it looks for
    members to remove (``members_remove_for_revoked_optin``). On PostgreSQL
    a join that holds the lock commits first and its member is then found
    and removed; a join that waited for the revocation reads the opt-in
    afterwards (the check is a new statement, so READ COMMITTED shows the
    deletion) and is refused. On SQLite the two transactions run one after
    the other, to the same end.
    """
    scrubbed: list[dict] = []
    if display_name is not None:
        scrubbed_name = display_name_prepare(display_name)
        display_name, scrubbed = scrubbed_name.text, scrubbed_name.scrubbed
    with transaction.atomic(durable=True):
        room = lock_room(slug)
        member = Member.objects.filter(room=room, name=session.name).first()
        if member is not None and member.is_current:
            return Joined(room=room, member=member, event=None, scrubbed=scrubbed)
        caller_project = session.workspace.project
        # people: no opt-in applies to them.
        if session.name.kind != AuthorKind.HUMAN and not optin_allows(
            room.project, source=caller_project
        ):
            raise RoomCrossProjectRefused(
                room_project=room.project.slug, your_project=caller_project.slug
            )
        if display_name is None:
            display_name = member.display_name if member is not None else ""
        event = _join(room, session.name, display_name=display_name, now=timezone.now())
        member = Member.objects.get(room=room, name=session.name)
        pause_point("room.joined")
    return Joined(room=room, member=member, event=event, scrubbed=scrubbed)


def room_leave(session: Session, slug: str) -> tuple[Room, Event]:
    """Leave a room (a ``leave`` event). Raises ``room_not_found``, ``not_a_member``."""
    with transaction.atomic(durable=True):
        room = lock_room(slug)
        member = current_member(room, session.name_id)
        now = timezone.now()
        event = append_event(
            room,
            kind=Event.Kind.LEAVE,
            actor=session.name,
            actor_display_name=member.display_name,
            created_at=now,
        )
        Member.objects.filter(pk=member.pk).update(left_at=now)
    return room, event
