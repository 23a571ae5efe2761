"""A room that pauses itself when agents loop (SPEC §8 ``room_flood_limit``).

Agents' messages are counted per room in windows of a minute, on the room
row itself: the window's start (``flood_window``, Unix seconds) and its count
(``flood_count``) are written by the very UPDATE that advances the room's
head seq (``stream.append_event``), under the room lock the send already
holds. So counting costs no statement, and racing sends are counted one
after another like their seqs. A window opens with the first agent message
after the previous one ended; the message that would make it hold more than
the limit is refused, and pauses the room instead:

* ``paused_until`` is set a minute ahead and the counter is cleared;
* one ``moderation`` event (action ``pause``) says why, once: sends refused
  while the room is paused write nothing (``423 room_paused`` with
  ``details.resumes_at`` and ``Retry-After``);
* the pause is audited under ``plumb``, so operators find it in the trail.

The room resumes by itself: once ``paused_until`` has passed, sends go
through again, with no job and no event (a reader sees the next message).
An operator may resume it earlier (``room_resume``: the admin action and
``plumb room resume``), which appends a ``resume`` event and is audited.

People posting from the admin (names of kind ``human``) are neither counted
nor paused; reviews are not counted, but an agent's review waits out a pause
like its messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from common import metrics
from mailbox.representation import timestamp
from mailbox.services.audit import audit_record, reason_check
from rooms.errors import RoomPaused
from rooms.models import Event, Room
from rooms.services.stream import append_event, lock_room

# The window messages are counted in, and how long a pause lasts.
FLOOD_WINDOW = 60
PAUSE = timedelta(seconds=FLOOD_WINDOW)
# The actor the audit trail names for what plumb does by itself.
PLUMB_ACTOR = "plumb"


@dataclass(frozen=True)
class FloodCount:
    """The room's window after one more agent message: where it opened, and its count."""

    window: int
    count: int


def flood_step(room: Room, limit: int, now: datetime) -> FloodCount | None:
    """The window with one more agent message in it; None when the project sets no limit."""
    if not limit:
        return None
    second = int(now.timestamp())
    if second - room.flood_window >= FLOOD_WINDOW:
        return FloodCount(window=second, count=1)
    return FloodCount(window=room.flood_window, count=room.flood_count + 1)


def room_pause_check(room: Room, *, limit: int, now: datetime) -> None:
    """``room_paused`` if ``room`` (read under its lock) is paused at ``now``."""
    if room.paused_until is not None and room.paused_until > now:
        metrics.CAP_REFUSALS.labels(cap="room_flood_limit").inc()
        raise RoomPaused(resumes_at=timestamp(room.paused_until), room_flood_limit=limit)


def room_pause(room: Room, *, limit: int, now: datetime, cursor=None) -> datetime:
    """Pause ``room`` for a minute; the caller holds its lock, and refuses its send.

    Returns when the room resumes. The caller's transaction commits the
    pause, then the caller raises ``room_paused``: its own message is not stored.
    """
    until = now + PAUSE
    Room.objects.filter(pk=room.pk).update(paused_until=until, flood_window=0, flood_count=0)
    room.paused_until, room.flood_window, room.flood_count = until, 0, 0
    reason = (
        f"Paused: agents posted more than {limit} messages in a minute. "
        f"Sends resume at {timestamp(until)}."
    )
    append_event(
        room, cursor=cursor, kind=Event.Kind.MODERATION, data={"action": "pause", "reason": reason}
    )
    audit_record(
        actor=PLUMB_ACTOR,
        action="room.pause",
        project=room.project,  # a query, once per pause
        room_slug=room.slug,
        target="room",
        reason=reason,
    )
    transaction.on_commit(metrics.ROOM_PAUSES.inc)
    metrics.CAP_REFUSALS.labels(cap="room_flood_limit").inc()
    return until


def room_resume(room: Room, *, actor: str, reason: str = "") -> Event | None:
    """Resume a paused room before its time: sends go through at once.

    A ``moderation`` event (action ``resume``) and an audit record
    (``room.resume``), under the room lock; the flood count starts afresh.
    A room that is not paused (or whose pause has run out) changes and
    records nothing: returns None.
    """
    reason = reason_check(reason, required=False)
    with transaction.atomic():
        current = lock_room(room.slug)
        now = timezone.now()
        if current.paused_until is None or current.paused_until <= now:
            return None
        Room.objects.filter(pk=current.pk).update(paused_until=None, flood_window=0, flood_count=0)
        event = append_event(
            current, kind=Event.Kind.MODERATION, data={"action": "resume", "reason": reason}
        )
        audit_record(
            actor=actor,
            action="room.resume",
            project=current.project,
            room_slug=current.slug,
            target="room",
            reason=reason,
        )
    room.paused_until = None
    return event


def room_paused_now(room: Room, now: datetime | None = None) -> bool:
    return room.paused_until is not None and room.paused_until > (now or timezone.now())
