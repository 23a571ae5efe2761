"""The stream core of a room: its row lock, its next event, its current members.

Membership, sending, reviews and moderation all write through here.

Each event-producing service locks the room row (``select_for_update``) for
its whole transaction, then allocates the next seq from ``Room.head_seq``.
On PostgreSQL the row lock queues concurrent writers of one room; on SQLite
the IMMEDIATE transaction serialises all writers. Either way the checks a
send makes (membership, ``require_read``, idempotency) and the insert they
guard are one atomic step: no other event can slip in between.

Every event is appended by :func:`append_event`, which also wakes this
process's waiting calls once the event is committed (``mailbox/wakeups.py``):
a ``read_messages`` or ``wait_for_activity`` waiting for it answers at once.
"""

from __future__ import annotations

from typing import Any

from common import limits, wake
from common.bodies import text_prepare
from common.errors import ValidationFailed
from common.prepared import PreparedInsert, PreparedUpdate, Writes, new
from common.scrubbing import ScrubResult
from rooms.errors import NotAMember, RoomNotFound
from rooms.models import Event, Member, Room


def display_name_prepare(display_name: object) -> ScrubResult:
    """``display_name``: short text, no NUL, scrubbed of secrets; ``validation_error``."""
    if not isinstance(display_name, str) or len(display_name) > limits.DISPLAY_NAME_MAX:
        raise ValidationFailed.field(
            "display_name",
            f"At most {limits.DISPLAY_NAME_MAX} characters.",
            f"display_name must be text of at most {limits.DISPLAY_NAME_MAX} characters.",
        )
    if "\x00" in display_name:
        raise ValidationFailed.field(
            "display_name", "No NUL.", "display_name must not contain NUL."
        )
    return text_prepare(display_name, field="display_name", max_length=limits.DISPLAY_NAME_MAX)


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


def current_member(room: Room, name_id: int) -> Member:
    """The name's membership of the room if it has not left; ``not_a_member``."""
    member = Member.objects.filter(room=room, name_id=name_id, left_at__isnull=True).first()
    if member is None:
        raise NotAMember()
    return member


# Kinds of event that never change who is in a room or a member's display name.
# Every other kind (join, leave, moderation, and any kind added later) may.
_MEMBERS_UNCHANGED_BY = (Event.Kind.MESSAGE, Event.Kind.REVIEW)


def members_changed_since(room: Room, seq: int) -> bool:
    """Whether the room's current members may have changed after its event ``seq``.

    The caller holds the room row lock. Joining, leaving, a removal (by an
    operator or a revoked opt-in) and a new display name each append their
    event in the transaction that changes the member row, under this lock; so
    with the lock held every such change is either committed, and its event
    is after ``seq``, or not yet begun. On PostgreSQL this query is a statement
    run after the lock was granted, so READ COMMITTED shows it every change
    committed before. Mutes and hidden messages count as changes too: a false
    alarm costs the caller some work, never a wrong answer.
    """
    if room.head_seq == seq:
        return False
    return (
        Event.objects.filter(room=room, seq__gt=seq)
        .exclude(kind__in=_MEMBERS_UNCHANGED_BY)
        .exists()
    )


# Every event goes through these; their SQL is built once per process
# (common.prepared). Rooms have no signal receivers.
_set_head_seq = PreparedUpdate(Room, ["head_seq"])
_set_head_seq_and_flood = PreparedUpdate(Room, ["head_seq", "flood_window", "flood_count"])
_insert_event = PreparedInsert(Event)


def append_event(
    room: Room,
    cursor=None,
    *,
    writes: Writes | None = None,
    flood: tuple[int, int] | None = None,
    **fields: Any,
) -> Event:
    """Insert the room's next event. The caller holds the room row lock.

    ``cursor``: the caller's open cursor, if it has one, to run the statements on.
    ``writes``: the caller's ``Writes``, to add the event's writes to (sent
    with the caller's own on PostgreSQL; the event's ``message`` may then be
    one that ``writes`` inserts). The event's key is known once
    ``writes.run()`` returned.
    ``flood``: the room's flood window and count with this event
    (``rooms.services.flood``), written by the same UPDATE as the head seq.
    """
    if writes is None:
        writes = Writes(cursor)
        own = True
    else:
        own = False
    room.head_seq += 1
    if flood is None:
        writes.update(_set_head_seq, room.pk, head_seq=room.head_seq)
    else:
        room.flood_window, room.flood_count = flood
        writes.update(
            _set_head_seq_and_flood,
            room.pk,
            head_seq=room.head_seq,
            flood_window=room.flood_window,
            flood_count=room.flood_count,
        )
    event = new(Event, room=room, seq=room.head_seq, **fields)
    message = fields.get("message")
    # A message that ``writes`` inserts has no key until they run.
    writes.insert(_insert_event, event, refs={"message_id": message} if message else None)
    # At the commit, not now: a waiter woken before it would find nothing and
    # sleep on. A rolled-back event wakes no one.
    wake.publish_with(writes, [room_topic(room.pk)])
    if own:
        writes.run()
    return event


# What a room's events publish: "r:<room id>". Sparse (common/wake/topics.py):
# every send publishes one, and a server process holds a room's waiting call
# only now and then, so a send reaches only the processes of the host that
# hold one rather than waking every other process for nothing.
ROOM_PREFIX = "r:"
wake.sparse(ROOM_PREFIX)


def room_topic(room_id: int) -> str:
    """What a room's events publish, and its waiters wait on (common/wake/)."""
    return f"{ROOM_PREFIX}{room_id}"
