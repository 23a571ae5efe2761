"""Every state change of a room: create, join, leave, send, review, read positions.

Each event-producing service locks the room row (``select_for_update``) for
its whole transaction, then allocates the next seq from ``Room.head_seq``.
On PostgreSQL the row lock queues concurrent writers of one room; on SQLite
the IMMEDIATE transaction serialises all writers. Either way the checks a
send makes (membership, ``require_read``, idempotency) and the insert they
guard are one atomic step: no other event can slip in between.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import BigIntegerField, F, FilteredRelation, OuterRef, Q, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from common.bodies import body_prepare, idempotency_key_check
from common.errors import ValidationFailed
from common.prepared import (
    Prepared,
    PreparedInsert,
    PreparedUpdate,
    concrete_attnames,
    instances_from_row,
)
from common.text import visible
from mailbox.errors import CrossProjectRefused, IdempotencyKeyReused
from mailbox.models import AgentName, Session
from mailbox.selectors import optin_allows
from mailbox.services.identity import slug_check
from rooms import mentions as mention_rules
from rooms.errors import (
    MemberMuted,
    MessageNotFound,
    NotAMember,
    RoomExists,
    RoomLocked,
    RoomNotFound,
    UnreadMessages,
)
from rooms.models import Event, Member, Message, MessageMention, Room
from rooms.selectors import (
    events_page,
    last_ordinal,
    member_get_for_session,
    with_event_relations,
)

# Kinds that ``require_read`` refuses to talk over (SPEC §4.2 step 4).
BLOCKING_KINDS = (Event.Kind.MESSAGE, Event.Kind.REVIEW)
MAX_UNSEEN_LISTED = 50


def _check_display_name(display_name: object) -> str:
    if not isinstance(display_name, str) or len(display_name) > 64:
        raise ValidationFailed(
            "display_name must be text of at most 64 characters.",
            details={"display_name": ["At most 64 characters."]},
        )
    if "\x00" in display_name:
        raise ValidationFailed(
            "display_name must not contain NUL.", details={"display_name": ["No NUL."]}
        )
    return display_name


def lock_room(slug: str) -> Room:
    """The room row, locked until the transaction ends; ``room_not_found``."""
    # of=("self",): lock the room row only, not the joined project row.
    room = (
        Room.objects.select_for_update(of=("self",))
        .select_related("project")
        .filter(slug=slug)
        .first()
    )
    if room is None:
        raise RoomNotFound(f"No room is named {slug!r}.")
    return room


def _current_member(room: Room, name_id: int) -> Member:
    member = Member.objects.filter(room=room, name_id=name_id, left_at__isnull=True).first()
    if member is None:
        raise NotAMember()
    return member


# Every event and message goes through these; their SQL is built once per
# process (common.prepared). Rooms have no signal receivers.
_set_head_seq = PreparedUpdate(Room, ["head_seq"])
_insert_event = PreparedInsert(Event)
_insert_message = PreparedInsert(Message)
_advance_read_seq = PreparedUpdate(Member, ["read_seq"], where='"read_seq" < %s')


def append_event(room: Room, cursor=None, **fields: Any) -> Event:
    """Insert the room's next event. The caller holds the room row lock.

    ``cursor``: the caller's open cursor, if it has one, to run the statements on.
    """
    room.head_seq += 1
    _set_head_seq.update(room.pk, cursor=cursor, head_seq=room.head_seq)
    event = Event(room=room, seq=room.head_seq, **fields)
    _insert_event.insert(event, cursor=cursor)
    return event


# --- rooms and members ------------------------------------------------------------


def room_create(
    session: Session, *, slug: str, title: str = "", topic: str = "", display_name: str = ""
) -> tuple[Room, Event]:
    """Create a room in the caller's project; the creator joins (its seq 1 event).

    Raises ``validation_error`` and ``room_exists``.
    """
    slug_check(slug)
    if not isinstance(title, str) or len(title) > 200:
        raise ValidationFailed("title is at most 200 characters.", details={"title": ["Too long."]})
    if not isinstance(topic, str) or len(topic) > 2000:
        raise ValidationFailed(
            "topic is at most 2000 characters.", details={"topic": ["Too long."]}
        )
    display_name = _check_display_name(display_name)
    try:
        with transaction.atomic():
            now = timezone.now()
            room = Room.objects.create(
                slug=slug,
                project=session.workspace.project,
                title=title,
                topic=topic,
                created_by=session.name,
                created_at=now,
            )
            event = _join(room, session.name, display_name=display_name, now=now)
    except IntegrityError:
        raise RoomExists(f"A room named {slug!r} already exists.") from None
    return room, event


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


def room_join(session: Session, slug: str, *, display_name: str | None = None) -> Joined:
    """Join a room (a ``join`` event); joining again changes nothing.

    A room of another project may be joined only if that project opted in to
    the caller's. Raises ``room_not_found``, ``cross_project_refused`` and
    ``validation_error``.
    """
    if display_name is not None:
        display_name = _check_display_name(display_name)
    with transaction.atomic():
        room = lock_room(slug)
        member = Member.objects.filter(room=room, name=session.name).first()
        if member is not None and member.is_current:
            return Joined(room=room, member=member, event=None)
        caller_project = session.workspace.project
        if not optin_allows(room.project, source=caller_project):
            raise CrossProjectRefused(
                "This room's project has not opted in to your project.",
                details={"room_project": room.project.slug, "your_project": caller_project.slug},
            )
        if display_name is None:
            display_name = member.display_name if member is not None else ""
        event = _join(room, session.name, display_name=display_name, now=timezone.now())
        member = Member.objects.get(room=room, name=session.name)
    return Joined(room=room, member=member, event=event)


def room_leave(session: Session, slug: str) -> tuple[Room, Event]:
    """Leave a room (a ``leave`` event). Raises ``room_not_found``, ``not_a_member``."""
    with transaction.atomic():
        room = lock_room(slug)
        member = _current_member(room, session.name_id)
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


# --- sending ------------------------------------------------------------------------


@dataclass
class MessageSent:
    message: Message
    latest_seq: int
    unseen_before_send: int
    mentions: list[dict[str, str]]
    unresolved_mentions: list[str]
    mention_warnings: list[dict[str, str]]
    scrubbed: list[dict] = field(default_factory=list)
    replayed: bool = False


def message_send(
    session: Session,
    slug: str,
    *,
    body: str,
    reply_to: str | None = None,
    idempotency_key: str | None = None,
    after_seq: int | None = None,
    require_read: bool = False,
) -> MessageSent:
    """Post a message (SPEC §4.2): the seven steps, atomically under the room lock.

    Raises ``validation_error``, ``body_too_large``, ``room_not_found``,
    ``not_a_member``, ``member_muted``, ``room_locked``, ``message_not_found``,
    ``unread_messages`` and ``idempotency_key_reused``. A refused send stores
    nothing, so its idempotency key stays unused.
    """
    prepared = body_prepare(body)
    idempotency_key_check(idempotency_key)
    if after_seq is not None and (
        isinstance(after_seq, bool) or not isinstance(after_seq, int) or after_seq < 0
    ):
        raise ValidationFailed(
            "after_seq must be a whole number of at least 0.", details={"after_seq": ["Invalid."]}
        )
    try:
        sent = _send_locked(
            session,
            slug,
            text=prepared.text,
            reply_to=reply_to,
            idempotency_key=idempotency_key,
            after_seq=after_seq,
            require_read=require_read,
        )
    except IntegrityError:
        # A concurrent retry with the same key won the race (possible only
        # where row locks do not serialise, i.e. never on SQLite): replay it.
        if idempotency_key is None:
            raise
        with transaction.atomic():
            room = Room.objects.filter(slug=slug).first()
            sent = (
                _replay(room, session.name_id, idempotency_key, prepared.text, reply_to)
                if room
                else None
            )
        if sent is None:
            raise
    sent.scrubbed = prepared.scrubbed
    return sent


# Everything a send reads, in one query compiled once per process
# (common.prepared): the room row, locked (of=("self",): not the member
# row); the caller's current membership; the message ordinals that give the
# unseen count above the reference point (after_seq, else the read position)
# and the new message's ordinals; and whether anything from others sits above
# the read position. Index look-ups only, however much the caller has not read.
_FIGURES = ("total", "seen", "own", "own_seen", "newer")
_room_for_send = Prepared(
    lambda slug, name_id, after_seq: (
        Room.objects.select_for_update(of=("self",))
        .annotate(
            me=FilteredRelation(
                "members", condition=Q(members__name_id=name_id, members__left_at__isnull=True)
            )
        )
        .filter(slug=slug)
        .annotate(
            my_read_seq=F("me__read_seq"),
            reference=Coalesce(Value(after_seq, BigIntegerField()), F("me__read_seq")),
        )
        .annotate(
            total=last_ordinal("ordinal", OuterRef("pk")),
            seen=last_ordinal("ordinal", OuterRef("pk"), upto=OuterRef("reference")),
            own=last_ordinal("author_ordinal", OuterRef("pk"), author=name_id),
            own_seen=last_ordinal(
                "author_ordinal", OuterRef("pk"), author=name_id, upto=OuterRef("reference")
            ),
            # The first such event, not EXISTS: with the read position coming
            # from the row, PostgreSQL's generic EXISTS plan scans the whole
            # table; ORDER BY seq LIMIT 1 walks the (room, seq) index from it.
            newer=Subquery(
                Event.objects.filter(room=OuterRef("pk"), seq__gt=OuterRef("my_read_seq"))
                .exclude(actor_id=name_id)
                .order_by("seq")
                .values("seq")[:1]
            ),
        )
        .order_by()
        .values_list(
            *concrete_attnames(Room), *(f"me__{f}" for f in concrete_attnames(Member)), *_FIGURES
        )
    ),
    params=["slug", "name_id", "after_seq"],
)


@dataclass
class _SendState:
    room: Room
    member: Member | None
    total: int  # messages in the room
    seen: int  # messages up to the reference point
    own: int  # the caller's messages in the room
    own_seen: int  # the caller's messages up to the reference point
    newer: int | None  # seq of the first event from others above the caller's read position


def _lock_room_for_send(slug: str, name_id: int, after_seq: int | None, cursor) -> _SendState:
    rows = _room_for_send.rows(cursor=cursor, slug=slug, name_id=name_id, after_seq=after_seq)
    if not rows:
        raise RoomNotFound(f"No room is named {slug!r}.")
    row = rows[0]
    room, member = instances_from_row(row, Room, Member)
    figures = dict(zip(_FIGURES, row[-len(_FIGURES) :], strict=True))
    return _SendState(room=room, member=member if member.pk is not None else None, **figures)


def _send_locked(
    session: Session,
    slug: str,
    *,
    text: str,
    reply_to: str | None,
    idempotency_key: str | None,
    after_seq: int | None,
    require_read: bool,
) -> MessageSent:
    # One cursor for the send's own statements: opening one costs more than
    # SQLite needs for each of them.
    with transaction.atomic(), connection.cursor() as cursor:
        state = _lock_room_for_send(slug, session.name_id, after_seq, cursor)
        room, member = state.room, state.member
        # Step 2 first: a retry of a send that succeeded replays even if the
        # room moved on, was locked, or the author has since left.
        if idempotency_key is not None:
            replay = _replay(room, session.name_id, idempotency_key, text, reply_to)
            if replay is not None:
                return replay
        if member is None:
            raise NotAMember()
        if member.muted:
            raise MemberMuted()
        if room.locked:
            raise RoomLocked()
        parent = None
        if reply_to is not None:
            parent = Message.objects.filter(room=room, public_id=reply_to).first()
            if parent is None:
                raise MessageNotFound(details={"reply_to": reply_to})

        reference = after_seq if after_seq is not None else member.read_seq
        if require_read:
            blocking = Event.objects.filter(
                room=room, seq__gt=reference, kind__in=BLOCKING_KINDS
            ).exclude(actor_id=session.name_id)
            unseen = list(with_event_relations(blocking.order_by("seq"))[:MAX_UNSEEN_LISTED])
            if unseen:
                raise UnreadMessages(
                    events=unseen, unseen_count=blocking.count(), latest_seq=room.head_seq
                )
        # Step 3 from the ordinals (rooms.selectors.others_messages_after).
        unseen_before_send = (state.total - state.seen) - (state.own - state.own_seen)

        resolved = _resolve_mentions(room, text)
        # What this send reported is kept, so that a replay answers the same.
        report = {
            "unseen_before_send": unseen_before_send,
            "unresolved_mentions": resolved["unresolved"],
            "mention_warnings": resolved["warnings"],
        }
        now = timezone.now()
        message = Message(
            room=room,
            seq=room.head_seq + 1,
            ordinal=state.total + 1,
            author_ordinal=state.own + 1,
            author=session.name,
            author_display_name=member.display_name,
            body=text,
            reply_to=parent,
            idempotency_key=idempotency_key,
            mentions=resolved["mentions"],
            send_report=report,
            created_at=now,
        )
        _insert_message.insert(message, cursor=cursor)
        append_event(
            room,
            cursor=cursor,
            kind=Event.Kind.MESSAGE,
            actor=session.name,
            actor_display_name=member.display_name,
            message=message,
            created_at=now,
        )
        if resolved["names"]:
            MessageMention.objects.bulk_create(
                [MessageMention(message=message, name_id=n) for n in resolved["names"]]
            )
        # Step 5: the sender has seen everything up to its own message only if
        # nothing from others sat above its read position.
        if state.newer is None:
            _advance_read_seq.update(member.pk, message.seq, cursor=cursor, read_seq=message.seq)
    return MessageSent(
        message=message,
        latest_seq=room.head_seq,
        mentions=resolved["mentions"],
        **report,
    )


def _replay(
    room: Room, name_id: int, key: str, text: str, reply_to: str | None
) -> MessageSent | None:
    original = (
        Message.objects.select_related("author", "reply_to", "room")
        .filter(room=room, author_id=name_id, idempotency_key=key)
        .first()
    )
    if original is None:
        return None
    # A retry repeats its request: the same (scrubbed) body and the same parent.
    original_parent = original.reply_to.public_id if original.reply_to_id else None
    if original.body != text or original_parent != reply_to:
        raise IdempotencyKeyReused(
            "This idempotency key was already used for a different message in this room.",
            details={"message_id": original.public_id},
        )
    report = original.send_report or {}
    return MessageSent(
        message=original,
        latest_seq=room.head_seq,
        unseen_before_send=report.get("unseen_before_send", 0),
        mentions=original.mentions,
        unresolved_mentions=report.get("unresolved_mentions", []),
        mention_warnings=report.get("mention_warnings", []),
        replayed=True,
    )


def _resolve_mentions(room: Room, text: str) -> dict[str, Any]:
    if not mention_rules.may_mention(text):
        return {"mentions": [], "names": [], "unresolved": [], "warnings": []}
    members = list(
        Member.objects.filter(room=room, left_at__isnull=True).values_list(
            "name_id", "name__handle", "display_name"
        )
    )
    by_handle = {handle: name_id for name_id, handle, _ in members}
    result = mention_rules.resolve_mentions(
        text,
        [mention_rules.Member(handle=handle, display_name=dn) for _, handle, dn in members],
    )
    return {
        "mentions": [
            {
                "handle": m.handle,
                "display_name": m.display_name,
                "display_name_visible": visible(m.display_name),
            }
            for m in result.mentions
        ],
        "names": [by_handle[m.handle] for m in result.mentions],
        "unresolved": result.unresolved,
        "warnings": result.warnings,
    }


# --- reviews and read positions ----------------------------------------------------


def review_add(
    session: Session, slug: str, message_id: str, *, verdict: str, body: str | None = None
) -> tuple[Room, Event]:
    """Review a message: a ``review`` event with its own seq (it counts for require_read).

    Raises ``validation_error``, ``body_too_large``, ``room_not_found``,
    ``not_a_member``, ``member_muted``, ``room_locked`` and ``message_not_found``.
    """
    if verdict not in Event.Verdict.values:
        raise ValidationFailed(
            "verdict must be approve, request_changes or comment.",
            details={"verdict": [f"One of: {', '.join(Event.Verdict.values)}."]},
        )
    text = body_prepare(body).text if body not in (None, "") else ""
    with transaction.atomic():
        room = lock_room(slug)
        member = _current_member(room, session.name_id)
        if member.muted:
            raise MemberMuted()
        if room.locked:
            raise RoomLocked()
        message = Message.objects.filter(room=room, public_id=message_id).first()
        if message is None:
            raise MessageNotFound()
        event = append_event(
            room,
            kind=Event.Kind.REVIEW,
            actor=session.name,
            actor_display_name=member.display_name,
            message=message,
            verdict=verdict,
            body=text,
        )
        event.message = message
        event.actor = session.name
    return room, event


def read_position_set(session: Session, slug: str, *, seq: int) -> tuple[Room, Member]:
    """Move the caller's read position forward to ``seq`` (never backwards).

    Raises ``room_not_found``, ``not_a_member`` and ``validation_error`` (a
    seq beyond the room's head).
    """
    room = Room.objects.filter(slug=slug).first()
    if room is None:
        raise RoomNotFound()
    member = _current_member(room, session.name_id)
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= room.head_seq:
        raise ValidationFailed(
            f"seq must be between 0 and the room's latest_seq ({room.head_seq}).",
            details={"seq": [f"From 0 to {room.head_seq}."]},
        )
    read_advance(member, seq)
    return room, member


def read_advance(member: Member, seq: int) -> None:
    """Forward-only: a conditional UPDATE, so racing readers never move it back."""
    if seq > member.read_seq:
        Member.objects.filter(pk=member.pk, read_seq__lt=seq).update(read_seq=seq)
        member.read_seq = seq


@dataclass
class EventsRead:
    room: Room
    events: list[Event]
    has_more: bool
    read_seq: int
    latest_seq: int


def events_read(
    session: Session,
    slug: str,
    *,
    after_seq: int | None = None,
    limit: int = 50,
    kinds: list[str] | None = None,
    mark_read: bool = True,
) -> EventsRead:
    """Events after ``after_seq`` (default: the read position), ascending.

    Moves the read position forward to the highest seq returned unless
    ``mark_read`` is false. Raises ``room_not_found`` and ``not_a_member``.
    """
    room, member = member_get_for_session(session, slug)
    start = after_seq if after_seq is not None else member.read_seq
    events, has_more = events_page(room, after_seq=start, limit=limit, kinds=kinds)
    if mark_read and events:
        read_advance(member, events[-1].seq)
    latest = max(room.head_seq, events[-1].seq if events else 0)
    return EventsRead(
        room=room, events=events, has_more=has_more, read_seq=member.read_seq, latest_seq=latest
    )
