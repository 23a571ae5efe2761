"""Read positions and reading a room's events, waiting for them if asked.

Reading takes no room lock: a read position only ever moves forward, by a
conditional UPDATE, so racing readers (or a reader and a send) never move
it back.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from common import groupcommit
from common.errors import ValidationFailed
from common.pause import pause_point
from mailbox import wakeups
from mailbox.models import Session
from rooms.errors import RoomNotFound
from rooms.models import Event, Member, Room
from rooms.selectors import UNREAD_KINDS, member_get_for_session
from rooms.selectors.pages import PageEvent, events_page
from rooms.services.stream import current_member, room_topic


def read_position_set(session: Session, slug: str, *, seq: int) -> tuple[Room, Member]:
    """Move the caller's read position forward to ``seq`` (never backwards).

    Raises ``room_not_found``, ``not_a_member`` and ``validation_error`` (a
    seq beyond the room's head).
    """
    room = Room.objects.filter(slug=slug).first()
    if room is None:
        raise RoomNotFound()
    member = current_member(room, session.name_id)
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= room.head_seq:
        raise ValidationFailed.field(
            "seq",
            f"From 0 to {room.head_seq}.",
            f"seq must be between 0 and the room's latest_seq ({room.head_seq}).",
        )
    read_advance(member, seq)
    return room, member


def read_advance(member: Member, seq: int, *, group: bool = False) -> None:
    """Forward-only: a conditional UPDATE, so racing readers never move it back.

    With ``group``, under plumb's server, the UPDATE joins the group commit of
    the requests beside it (``common/groupcommit.py``): the read's answer goes
    out once it is committed, with the other reads one message woke.
    """
    if seq > member.read_seq:
        if not (group and groupcommit.defer(read_positions_advance, (member.pk, seq))):
            Member.objects.filter(pk=member.pk, read_seq__lt=seq).update(read_seq=seq)
        member.read_seq = seq


def read_positions_advance(advances: list[tuple[int, int]]) -> None:
    """Move many members' read positions forward (``(member pk, seq)`` pairs), never back.

    One conditional UPDATE per distinct seq: the reads one message woke all
    move to the same seq, so a batch of them is one statement.
    """
    by_seq: dict[int, list[int]] = {}
    for pk, seq in advances:
        by_seq.setdefault(seq, []).append(pk)
    for seq, pks in sorted(by_seq.items()):
        for start in range(0, len(pks), _ADVANCE_CHUNK):
            chunk = pks[start : start + _ADVANCE_CHUNK]
            Member.objects.filter(pk__in=chunk, read_seq__lt=seq).update(read_seq=seq)


# Members per UPDATE: well under SQLite's limit on a statement's parameters.
_ADVANCE_CHUNK = 500


@dataclass
class EventsRead:
    room: Room
    events: list[PageEvent]
    has_more: bool
    read_seq: int
    latest_seq: int
    # The room's first kept seq when the read started below it (SPEC §4.3); else None.
    history_starts_at: int | None = None


def events_read(
    session: Session,
    slug: str,
    *,
    after_seq: int | None = None,
    limit: int = 50,
    kinds: list[str] | None = None,
    mark_read: bool = True,
    wait: float = 0,
) -> EventsRead:
    """Events after ``after_seq`` (default: the read position), ascending.

    Moves the read position forward across the events returned, unless
    ``mark_read`` is false; a read filtered by ``kinds`` stops just below the
    first event it left out, so a later ``require_read`` send still sees the
    messages the caller skipped. Raises ``room_not_found`` and ``not_a_member``.

    With ``wait`` (seconds), a read that would return nothing holds until an
    event above the reference exists, then answers as a read does. The
    reference is ``after_seq``, else the read position when the call started;
    an event that ``kinds`` leaves out does not end the wait, since the read
    would still return nothing. Waiting follows ``mailbox/wakeups.py`` (one
    waiting call per session, rationed per process, no transaction held);
    timed out or superseded, the answer is the read with no events.
    """
    if wait <= 0:
        return _read(session, slug, after_seq, limit=limit, kinds=kinds, mark_read=mark_read)
    # Before the wait takes the session's ticket: a refused read supersedes nothing.
    room, member = member_get_for_session(session, slug)
    reference = after_seq if after_seq is not None else member.read_seq

    def read(loaded: tuple[Room, Member] | None = None) -> EventsRead:
        # A waiting read's position joins the group commit: one message wakes
        # every member waiting in the room at once (common/groupcommit.py).
        return _read(
            session, slug, reference, limit=limit, kinds=kinds, mark_read=mark_read,
            loaded=loaded, group=True,
        )  # fmt: skip

    looks = itertools.count()

    def check() -> EventsRead | None:
        # The first look of this run reads the page with the membership just
        # loaded; a later one (woken in its thread) loads it again, so that a
        # caller removed from the room meanwhile is refused as a new call
        # would be, whatever kinds it waits for (SPEC §3.3).
        found = read((room, member) if next(looks) == 0 else None)
        return found if found.events else None

    # A read claims nothing (the events stay there for the session's other
    # calls): woken, it looks before it asks whether it was pushed out.
    return wakeups.wait_for(
        session, check, seconds=wait, idle=read, topics=[room_topic(room.pk)], look_first=True
    )


def _read(
    session: Session,
    slug: str,
    after_seq: int | None,
    *,
    limit: int,
    kinds: list[str] | None,
    mark_read: bool,
    loaded: tuple[Room, Member] | None = None,
    group: bool = False,
) -> EventsRead:
    room, member = loaded if loaded is not None else member_get_for_session(session, slug)
    start = after_seq if after_seq is not None else member.read_seq
    events, has_more = events_page(room, after_seq=start, limit=limit, kinds=kinds)
    if mark_read and events:
        # The page is read, the position not yet moved: a send may commit here.
        pause_point("read.paged")
        seen = max(start, member.read_seq)
        received = _received_up_to(room, member.name_id, seen, events, kinds)
        read_advance(member, received, group=group)
    latest = max(room.head_seq, events[-1].seq if events else 0)
    return EventsRead(
        room=room,
        events=events,
        has_more=has_more,
        read_seq=member.read_seq,
        latest_seq=latest,
        # Purged events were below history_starts_at: a read from there says so.
        history_starts_at=room.history_starts_at if start + 1 < room.history_starts_at else None,
    )


def _received_up_to(
    room: Room, name_id: int, seen: int, events: list[PageEvent], kinds: list[str] | None
) -> int:
    """How far the caller has now seen: never past a message it left out (SPEC §4.3).

    An unfiltered page is every event from its start to its last one. A page
    filtered by kind stops just below the first event it left out above
    ``seen`` (the read position, or the ``after_seq`` read from) that the
    caller still has to read: a message or review by someone else, the kinds
    that ``require_read`` and the unseen counts go by. Joins, leaves,
    moderation notices and the caller's own events left out by a filter do
    not hold the position back, or reading ``kinds=message`` and then
    answering with ``require_read`` would be refused over the very messages
    just read.
    """
    last = events[-1].seq
    if not kinds:
        return last
    left_out = (
        Event.objects.filter(room=room, seq__gt=seen, seq__lt=last, kind__in=UNREAD_KINDS)
        .exclude(kind__in=kinds)
        .exclude(actor_id=name_id)
        .order_by("seq")
        .values_list("seq", flat=True)
        .first()
    )
    return last if left_out is None else left_out - 1
