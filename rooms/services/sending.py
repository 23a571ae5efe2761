"""Sending messages (SPEC §4.2): the checks, the insert and the send report.

A send reads everything it checks in one query that also locks the room row,
so membership, mutes, the room lock, ``require_read`` and idempotency are
checked against the same state the message is inserted into: no other event
can slip in between a check and the insert it guards. A retry racing its own
first attempt with the same idempotency key is answered with a replay.

Mentions are resolved before the room lock is taken (up to 0.13 s of work on
a crafted body, during which no other event of the room, and on SQLite no
other write at all, could proceed); under the lock a send only checks that
the members it resolved against are still the members (``_mentions_resolve``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import (
    BigIntegerField,
    F,
    FilteredRelation,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
)
from django.db.models.functions import Coalesce
from django.utils import timezone

from common import metrics
from common.bodies import body_prepare, idempotency_key_check
from common.errors import ValidationFailed
from common.pause import pause_point
from common.prepared import (
    Prepared,
    PreparedInsert,
    PreparedUpdate,
    Ref,
    Writes,
    concrete_attnames,
    instances_from_row,
    new,
)
from common.text import visible
from mailbox.models import AuthorKind, DailyUsage, Session
from mailbox.representation import timestamp
from mailbox.services.budgets import budget_spend
from rooms import mentions as mention_rules
from rooms.errors import (
    MemberMuted,
    MessageIdempotencyKeyReused,
    NotAMember,
    ReplyToNotFound,
    RoomLocked,
    RoomNotFound,
    RoomPaused,
    UnreadMessages,
)
from rooms.models import MESSAGE_INDEX, Event, Member, Message, MessageMention, Room
from rooms.selectors import (
    UNREAD_KINDS,
    last_ordinal,
    unseen_from_ordinals,
    with_event_relations,
)
from rooms.services.flood import flood_step, room_pause, room_pause_check
from rooms.services.stream import append_event, members_changed_since

MAX_UNSEEN_LISTED = 50

# Every send goes through these; their SQL is built once per process
# (common.prepared). Rooms have no signal receivers.
_insert_message = PreparedInsert(Message)
_advance_read_seq = PreparedUpdate(Member, ["read_seq"], where='"read_seq" < %s')


@dataclass(frozen=True)
class _Paused:
    """What a send that tipped its room over the flood limit returns instead of a message."""

    until: datetime
    limit: int


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

    Mentions are resolved first, against the members as they are before the
    lock is taken, and used under it unless the members changed in between
    (``_mentions_resolve``). Raises ``validation_error``, ``body_too_large``,
    ``room_not_found``, ``not_a_member``, ``member_muted``, ``room_locked``,
    ``message_not_found``, ``unread_messages``, ``idempotency_key_reused``,
    ``room_paused`` (the room's flood limit: ``rooms.services.flood``) and
    ``budget_exhausted`` (the sender project's ``daily_message_budget``).
    A refused send stores nothing, so its idempotency key stays unused; the
    one send that pauses its room stores the pause and its event instead.
    """
    prepared = body_prepare(body)
    idempotency_key_check(idempotency_key)
    if after_seq is not None and (
        isinstance(after_seq, bool) or not isinstance(after_seq, int) or after_seq < 0
    ):
        raise ValidationFailed.field(
            "after_seq", "Invalid.", "after_seq must be a whole number of at least 0."
        )
    mentions = _mentions_resolve(slug, session.name_id, prepared.text)
    # The words the index will hold, worked out before the lock (folding a
    # 16 KB body takes milliseconds); written under it, with the message.
    indexed = MESSAGE_INDEX.prepare(prepared.text)
    pause_point("send.mentions_resolved")
    try:
        sent = _send_locked(
            session,
            slug,
            text=prepared.text,
            indexed=indexed,
            mentions=mentions,
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
    if isinstance(sent, _Paused):
        # This send paused the room (its transaction committed the pause alone).
        raise RoomPaused(resumes_at=timestamp(sent.until), room_flood_limit=sent.limit)
    if not sent.replayed:
        # _send_locked's transaction is durable: the message is committed by now.
        metrics.ROOM_MESSAGES_SENT.inc()
    sent.scrubbed = prepared.scrubbed
    return sent


# Everything a send reads, in one query compiled once per process
# (common.prepared): the room row, locked (of=("self",): not the member
# row); the caller's current membership; the message ordinals that give the
# unseen count above the reference point (after_seq, else the read position)
# and the new message's ordinals; and whether anything from others sits above
# the read position. Index look-ups only, however much the caller has not read.
_FIGURES = ("total", "seen", "own", "own_seen", "newer", "flood_limit")


def _room_for_send_query(
    slug: str, name_id: int, after_seq: int | None, *, snapshot: bool
) -> QuerySet:
    figures = _FIGURES + (("snapshot_head_seq",) if snapshot else ())
    return (
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
            # The room's project's, read with the room: the flood count costs no query.
            flood_limit=F("project__room_flood_limit"),
            # The room's head seq in the statement's snapshot (see below).
            snapshot_head_seq=Subquery(Room.objects.filter(pk=OuterRef("pk")).values("head_seq")),
        )
        .order_by()
        .values_list(
            *concrete_attnames(Room), *(f"me__{f}" for f in concrete_attnames(Member)), *figures
        )
    )


_PARAMS = ["slug", "name_id", "after_seq"]
# SQLite takes its one write lock at BEGIN IMMEDIATE, before any read: what
# the statement reads is what the send writes into.
_room_for_send = Prepared(
    lambda slug, name_id, after_seq: _room_for_send_query(slug, name_id, after_seq, snapshot=False),
    params=_PARAMS,
)
# PostgreSQL, READ COMMITTED: a statement reads from the snapshot taken when
# it starts. One that waited for the room lock gets the room row as it is
# after the wait (the locked row is read again once it is granted), but the
# member row and every subquery as they were before: a send that queued
# behind another would miss that send's message (same ordinal, a read
# position moved past it) and a mute committed meanwhile. The same holds,
# without a wait, for a send whose snapshot predates a commit that released
# the lock just before this statement took it. Every change the figures
# depend on is made under the room lock by a transaction that appends an
# event, so it advances the room's head seq; so the figures are current
# exactly when the head seq of the statement's snapshot (a subquery) equals
# the locked row's. When they differ, the same statement runs again, with
# the lock held this time, and sees every commit made before it. (A
# reader's read position and the project's flood limit are written without
# the room lock and are read as they are at that moment in either case; a
# purge changes no figure a send counts.) So a send into a room nobody else writes
# to at that moment locks and reads in one statement.
_room_for_send_locking = Prepared(
    lambda slug, name_id, after_seq: _room_for_send_query(slug, name_id, after_seq, snapshot=True),
    params=_PARAMS,
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
    flood_limit: int  # the room's project's room_flood_limit


def _lock_room_for_send(slug: str, name_id: int, after_seq: int | None, cursor) -> _SendState:
    values = {"slug": slug, "name_id": name_id, "after_seq": after_seq}
    if cursor.db.vendor == "sqlite":
        rows = _room_for_send.rows(cursor=cursor, **values)
    else:
        rows = _room_for_send_locking.rows(cursor=cursor, **values)
        head_seq = concrete_attnames(Room).index("head_seq")
        if rows and rows[0][-1] != rows[0][head_seq]:
            # Read before the lock was ours: again, now that it is (see above).
            pause_point("send.figures_stale")
            rows = _room_for_send_locking.rows(cursor=cursor, **values)
        rows = [row[:-1] for row in rows]
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
    indexed: str,
    mentions: _Mentions | None,
    reply_to: str | None,
    idempotency_key: str | None,
    after_seq: int | None,
    require_read: bool,
) -> MessageSent | _Paused:
    # One cursor for the send's own statements: opening one costs more than
    # SQLite needs for each of them.
    # Durable: a send is its own unit of work; inside a caller's longer
    # transaction its room lock would be held, and its event hidden, until then.
    with transaction.atomic(durable=True), connection.cursor() as cursor:
        state = _lock_room_for_send(slug, session.name_id, after_seq, cursor)
        pause_point("send.locked")
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
        now = timezone.now()
        # People are neither paused nor counted: only agents loop.
        agent = session.name.kind == AuthorKind.AGENT
        if agent:
            room_pause_check(room, limit=state.flood_limit, now=now)
        parent = None
        if reply_to is not None:
            parent = Message.objects.filter(room=room, public_id=reply_to).first()
            if parent is None:
                raise ReplyToNotFound(reply_to=reply_to)

        reference = after_seq if after_seq is not None else member.read_seq
        if require_read:
            blocking = Event.objects.filter(
                room=room, seq__gt=reference, kind__in=UNREAD_KINDS
            ).exclude(actor_id=session.name_id)
            unseen = list(with_event_relations(blocking.order_by("seq"))[:MAX_UNSEEN_LISTED])
            if unseen:
                raise UnreadMessages(
                    events=unseen, unseen_count=blocking.count(), latest_seq=room.head_seq
                )
        # Step 3, from the ordinals the locking query read.
        unseen_before_send = unseen_from_ordinals(
            total=state.total, seen=state.seen, own=state.own, own_seen=state.own_seen
        )

        resolved = _mentions_for_room(room, text, mentions)
        # What this send reported is kept, so that a replay answers the same.
        report = {
            "unseen_before_send": unseen_before_send,
            "unresolved_mentions": resolved["unresolved"],
            "mention_warnings": resolved["warnings"],
        }
        flood = flood_step(room, state.flood_limit, now) if agent else None
        if flood is not None and flood.count > state.flood_limit:
            # Committed with this transaction; the send itself is refused after it.
            until = room_pause(room, limit=state.flood_limit, now=now, cursor=cursor)
            return _Paused(until=until, limit=state.flood_limit)
        project = session.workspace.project
        budget_spend(
            project,
            DailyUsage.What.MESSAGES,
            budget=project.daily_message_budget,
            author_kind=session.name.kind,
            now=now,
            cursor=cursor,
        )
        message = new(
            Message,
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
        # The message, its words, the head seq, the event, the read position and
        # the wake-up: one statement on PostgreSQL (common.prepared.Writes).
        writes = Writes(cursor)
        writes.insert(_insert_message, message)
        # Searchable the moment the send returns: same transaction (SPEC §9).
        MESSAGE_INDEX.insert_with(writes, Ref(message), indexed)
        append_event(
            room,
            writes=writes,
            kind=Event.Kind.MESSAGE,
            actor=session.name,
            actor_display_name=member.display_name,
            message=message,
            created_at=now,
            flood=(flood.window, flood.count) if flood is not None else None,
        )
        # Step 5: the sender has seen everything up to its own message only if
        # nothing from others sat above its read position.
        if state.newer is None:
            writes.update(_advance_read_seq, member.pk, message.seq, read_seq=message.seq)
        writes.run()
        if resolved["names"]:
            MessageMention.objects.bulk_create(
                [MessageMention(message=message, name_id=n) for n in resolved["names"]]
            )
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
        raise MessageIdempotencyKeyReused(message_id=original.public_id)
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


@dataclass(frozen=True)
class _Mentions:
    """Mentions resolved before the room lock, against its members as of event ``seq``."""

    room_id: int
    seq: int
    resolved: dict[str, Any]


def _mentions_resolve(slug: str, name_id: int, text: str) -> _Mentions | None:
    """Resolve the mentions in ``text`` against the room's members, before the lock.

    Resolution takes up to 0.13 s on a crafted body (markdown parsing,
    normalisation, confusable skeletons): under the room lock it would hold
    up every other event of the room, and on SQLite every write. So it runs
    first, without a transaction, against the members and the room's head seq
    read by one statement (one snapshot on both databases). ``None`` when the
    body mentions no one, or the caller is not a member: such a send is
    refused under the lock without paying for resolution (if the caller joins
    meanwhile, ``_mentions_for_room`` resolves there).

    The members may change before the lock is taken. That matters: the
    mentions endpoint lists every message that mentions a name, whether or
    not it is still in the room, so a mention of a member removed in between
    (by an operator, or by a revoked opt-in) would hand it a message posted
    after its removal; and a member who joined in between is in the room
    when the message is posted, so it is mentioned. ``_mentions_for_room``
    therefore uses this result only if no event that may change the members
    came after ``seq`` (``members_changed_since``), and resolves again under
    the lock otherwise: the same answer as resolving under the lock always,
    at that cost only when a join, leave or moderation raced the send. (An
    operator deleting a name outright, possible only for one that never
    posted, appends no event; a send racing that fails on the mention's
    foreign key.)
    """
    if not mention_rules.may_mention(text):
        return None
    rows = list(
        Member.objects.filter(room__slug=slug, left_at__isnull=True).values_list(
            "name_id", "name__handle", "display_name", "room_id", "room__head_seq"
        )
    )
    if not any(row[0] == name_id for row in rows):
        return None
    members = [row[:3] for row in rows]
    return _Mentions(room_id=rows[0][3], seq=rows[0][4], resolved=_resolution(text, members))


def _mentions_for_room(room: Room, text: str, early: _Mentions | None) -> dict[str, Any]:
    """The send's mentions, under the room lock: ``early`` if the members are unchanged."""
    if not mention_rules.may_mention(text):
        return {"mentions": [], "names": [], "unresolved": [], "warnings": []}
    # room_id: plumb never deletes a room, but were one deleted and another created
    # under its slug meanwhile, its seqs would start anew and could match.
    if (
        early is not None
        and early.room_id == room.pk
        and not members_changed_since(room, early.seq)
    ):
        return early.resolved
    members = list(
        Member.objects.filter(room=room, left_at__isnull=True).values_list(
            "name_id", "name__handle", "display_name"
        )
    )
    return _resolution(text, members)


def _resolution(text: str, members: list[tuple[int, str, str]]) -> dict[str, Any]:
    """Resolve ``text`` against ``(name_id, handle, display_name)`` rows of current members."""
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
