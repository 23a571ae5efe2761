"""Reads of rooms that apply visibility and fetch related rows up front.

``pages`` reads a page of a room's events for ``read_messages``; ``search``
finds what a session may read that matches a query (messages and notes).
"""

from __future__ import annotations

from typing import Any

from django.db.models import (
    Case,
    Count,
    Expression,
    FilteredRelation,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Coalesce, Substr

from common import limits
from common.prepared import Prepared, concrete_attnames, instances_from_row
from mailbox.models import Project, Session
from rooms.errors import MessageNotFound, NotAMember, RoomNotFound
from rooms.models import Event, Member, Message, MessageMention, Room

# Events a member has to read before talking over them: ``require_read``
# refuses a send while one from someone else sits above the reference point
# (SPEC §4.2 step 4), and a filtered read never moves past one (SPEC §4.3).
UNREAD_KINDS = (Event.Kind.MESSAGE, Event.Kind.REVIEW)


def with_event_relations(events: QuerySet[Event]) -> QuerySet[Event]:
    """Events with everything their representation reads, in the same query."""
    return events.select_related(
        "actor", "room", "message__room", "message__author", "message__reply_to"
    )


def last_ordinal(field: str, room: Any, *, author: Any = None, upto: Any = None) -> Expression:
    """``field`` ("ordinal" or "author_ordinal") of the room's latest message, 0 if none.

    Narrowed to one author's messages and to seqs up to ``upto`` when given;
    arguments are values or ``OuterRef``s. One index look-up either way.
    """
    messages = Message.objects.filter(room=room)
    if author is not None:
        messages = messages.filter(author=author)
    if upto is not None:
        messages = messages.filter(seq__lte=upto)
    latest = Subquery(messages.order_by("-seq").values(field)[:1], output_field=IntegerField())
    return Coalesce(latest, Value(0))


def unseen_from_ordinals(total: Any, seen: Any, own: Any, own_seen: Any) -> Any:
    """Messages by others above a reference point: the one unseen-count formula.

    All messages above it (``total - seen``) less the caller's own above it
    (``own - own_seen``), each a difference of ordinals, so the cost does not
    grow with the number of unread messages. Takes numbers (a send has read
    them already) or query expressions (the room list computes them in SQL).
    """
    return (total - seen) - (own - own_seen)


def others_messages_after(room: Any, author: Any, seq: Any) -> Expression:
    """How many messages by others than ``author`` the room holds above ``seq``."""
    return unseen_from_ordinals(
        total=last_ordinal("ordinal", room),
        seen=last_ordinal("ordinal", room, upto=seq),
        own=last_ordinal("author_ordinal", room, author=author),
        own_seen=last_ordinal("author_ordinal", room, author=author, upto=seq),
    )


def _annotate_for(rooms: QuerySet[Room], session: Session) -> QuerySet[Room]:
    """Add the caller's read position and unseen count, in the same query."""
    mine = Member.objects.filter(room=OuterRef("pk"), name_id=session.name_id, left_at__isnull=True)
    unseen = others_messages_after(OuterRef("pk"), session.name_id, OuterRef("my_read_seq"))
    return rooms.annotate(my_read_seq=Subquery(mine.values("read_seq")[:1])).annotate(
        my_unseen=Case(
            When(my_read_seq__isnull=True, then=Value(0)),
            default=unseen,
            output_field=IntegerField(),
        )
    )


def room_list_for_session(
    session: Session, *, after_slug: str | None = None, limit: int = limits.PAGE_DEFAULT
) -> tuple[list[Room], bool]:
    """Rooms of the caller's project and rooms it has joined, by slug, and whether more follow.

    The slug is the cursor: unique and never reused by another room, so a
    page continues where the last one ended even while rooms are created.
    """
    joined = Member.objects.filter(name_id=session.name_id, left_at__isnull=True).values("room")
    rooms = Room.objects.filter(
        Q(project_id=session.workspace.project_id) | Q(pk__in=joined)
    ).select_related("project")
    if after_slug:
        rooms = rooms.filter(slug__gt=after_slug)
    page = list(_annotate_for(rooms, session).order_by("slug")[: limit + 1])
    return page[:limit], len(page) > limit


def room_get_for_session(session: Session, slug: str) -> Room:
    """A room the caller may see: its project's, or one it is a member of.

    Slugs are server-wide and not secret, so another project's room answers
    ``not_a_member`` rather than pretending not to exist.
    """
    room = _annotate_for(Room.objects.select_related("project"), session).filter(slug=slug).first()
    if room is None:
        raise RoomNotFound(f"No room is named {slug!r}.")
    if room.my_read_seq is None and room.project_id != session.workspace.project_id:
        raise NotAMember()
    return room


# Every read of a room's events starts here: one query, compiled once per
# process (common.prepared), for the room, its project and the caller's
# current membership.
_room_and_member = Prepared(
    lambda slug, name_id: (
        Room.objects.annotate(
            me=FilteredRelation(
                "members", condition=Q(members__name_id=name_id, members__left_at__isnull=True)
            )
        )
        .filter(slug=slug)
        .order_by()
        .values_list(
            *concrete_attnames(Room),
            *(f"project__{f}" for f in concrete_attnames(Project)),
            *(f"me__{f}" for f in concrete_attnames(Member)),
        )
    ),
    params=["slug", "name_id"],
)


def member_get_for_session(session: Session, slug: str) -> tuple[Room, Member]:
    """The room and the caller's current membership; ``not_a_member`` otherwise."""
    rows = _room_and_member.rows(slug=slug, name_id=session.name_id)
    if not rows:
        raise RoomNotFound(f"No room is named {slug!r}.")
    room, project, member = instances_from_row(rows[0], Room, Project, Member)
    if member.pk is None:
        raise NotAMember()
    room.project = project
    member.room = room
    return room, member


def room_get_for_operator(slug: str) -> Room:
    """Any room, by slug, for moderation; raises ``room_not_found``."""
    room = Room.objects.select_related("project").filter(slug=slug).first()
    if room is None:
        raise RoomNotFound(f"No room is named {slug!r}.")
    return room


def message_get_for_operator(public_id: str) -> Message:
    """Any message, by its public id, with its room; raises ``message_not_found``."""
    message = Message.objects.select_related("room__project").filter(public_id=public_id).first()
    if message is None:
        raise MessageNotFound(f"No message has the id {public_id!r}.")
    return message


def room_list_for_operator(project: Project | None = None, *, limit: int = 100) -> list[Room]:
    """Rooms, newest first, at most ``limit``, each with ``members_count`` (current
    members); all projects when None."""
    current = (
        Member.objects.filter(room=OuterRef("pk"), left_at__isnull=True)
        .order_by()
        .values("room")
        .annotate(count=Count("pk"))
        .values("count")
    )
    rooms = Room.objects.select_related("project").annotate(
        members_count=Coalesce(Subquery(current, output_field=IntegerField()), Value(0))
    )
    if project is not None:
        rooms = rooms.filter(project=project)
    return list(rooms.order_by("-created_at", "-id")[:limit])


# How much of each body an operator listing reads: enough for its first line.
BODY_START_CHARS = 400


def message_list_for_operator(room: Room, *, limit: int = 50) -> list[Message]:
    """The room's messages, newest first, at most ``limit``, hidden ones included.

    Each comes with its author and ``body_start``, the first ``BODY_START_CHARS``
    characters of its body: a listing shows a first line, so it never reads
    whole bodies (16 KB each) off the database.
    """
    return list(
        Message.objects.filter(room=room)
        .select_related("author")
        .defer("body", "mentions", "send_report")
        .annotate(body_start=Substr("body", 1, BODY_START_CHARS))
        .order_by("-seq")[:limit]
    )


def member_get_for_operator(room: Room, handle: str) -> Member:
    """The current membership of ``handle`` in ``room``; raises ``not_a_member``."""
    member = (
        Member.objects.select_related("room", "name")
        .filter(room=room, name__handle=handle, left_at__isnull=True)
        .first()
    )
    if member is None:
        raise NotAMember(f"{handle!r} is not a member of room {room.slug!r}.")
    return member


def member_list(room: Room) -> list[Member]:
    return list(
        Member.objects.filter(room=room, left_at__isnull=True)
        .select_related("name")
        .order_by("joined_at", "id")
    )


def message_receipts_for_session(
    session: Session, slug: str, message_id: str
) -> tuple[Message, list[str], list[str]]:
    """A message of a room the caller is a member of, and its read receipts: the
    handles of the current members other than its author whose read position
    has reached its seq, and of those whose has not, in the order they joined.

    Raises ``room_not_found``, ``not_a_member`` and ``message_not_found``.
    Three queries: the room with the caller's membership, the message, the members.
    """
    room, _ = member_get_for_session(session, slug)
    message = (
        Message.objects.select_related("author", "reply_to")
        .filter(room=room, public_id=message_id)
        .first()
    )
    if message is None:
        raise MessageNotFound()
    message.room = room
    members = (
        Member.objects.filter(room=room, left_at__isnull=True)
        .exclude(name_id=message.author_id)
        .order_by("joined_at", "id")
        .values_list("name__handle", "read_seq")
    )
    read_by, unread_by = [], []
    for handle, read_seq in members:
        (read_by if read_seq >= message.seq else unread_by).append(handle)
    return message, read_by, unread_by


def joined_room_ids(session: Session) -> list[int]:
    return list(
        Member.objects.filter(name_id=session.name_id, left_at__isnull=True).values_list(
            "room_id", flat=True
        )
    )


def unread_rooms_for_session(session: Session, *, limit: int = limits.LIST_MAX) -> list[Member]:
    """The caller's memberships whose room has a message or review by someone else
    above its read position, by room slug, each with its ``room`` and ``unseen``.

    These are the events ``require_read`` holds a send back for, and the ones a
    read filtered by ``kinds`` never moves past (``UNREAD_KINDS``). Joins,
    leaves and moderation notices do not list a room: a read filtered to
    messages may leave them above the read position, and a room listed for
    them would wake ``wait_for_activity`` again and again. ``unseen`` is the
    count ``list_rooms`` shows, messages by others above the read position, so
    a room listed for a review alone shows 0. One query: per membership, the
    first such event (ORDER BY seq LIMIT 1 walks the (room, seq) index from
    the read position; see ``rooms.services.sending`` on EXISTS) and, for the
    rooms listed, the ordinals of ``others_messages_after``.
    """
    first_unread = (
        Event.objects.filter(
            room=OuterRef("room_id"), seq__gt=OuterRef("read_seq"), kind__in=UNREAD_KINDS
        )
        .exclude(actor_id=session.name_id)
        .order_by("seq")
        .values("seq")[:1]
    )
    members = (
        Member.objects.filter(name_id=session.name_id, left_at__isnull=True)
        .annotate(first_unread=Subquery(first_unread))
        .filter(first_unread__isnull=False)
        .annotate(
            unseen=others_messages_after(OuterRef("room_id"), session.name_id, OuterRef("read_seq"))
        )
        .select_related("room")
        .order_by("room__slug")
    )
    return list(members[:limit])


def mentions_for_session(
    session: Session, *, after_id: str | None, limit: int
) -> tuple[list[Message], bool]:
    """Messages that mention the caller's name, oldest first, across rooms."""
    mentions = MessageMention.objects.filter(name_id=session.name_id)
    if after_id:
        anchor = (
            MessageMention.objects.filter(name_id=session.name_id, message__public_id=after_id)
            .values_list("id", flat=True)
            .first()
        )
        if anchor is None:
            raise MessageNotFound("after_id names no message that mentions you.")
        mentions = mentions.filter(id__gt=anchor)
    page = list(
        mentions.order_by("id").select_related(
            "message__room", "message__author", "message__reply_to"
        )[: limit + 1]
    )
    return [m.message for m in page[:limit]], len(page) > limit
