"""Reviews of messages: a ``review`` event with its own seq.

A review is checked (membership, mute, room lock, the message) and appended
under the room row lock (``rooms.services.stream``), so a mute, a lock or a
leave cannot land between the checks and the event they allow.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from common.bodies import body_prepare
from common.errors import ValidationFailed
from mailbox.models import AuthorKind, DailyUsage, Session
from mailbox.services.budgets import budget_spend
from rooms.errors import MemberMuted, MessageNotFound, RoomLocked
from rooms.models import Event, Message, Room
from rooms.services.flood import room_pause_check
from rooms.services.stream import append_event, current_member, lock_room


def review_add(
    session: Session, slug: str, message_id: str, *, verdict: str, body: str | None = None
) -> tuple[Room, Event]:
    """Review a message: a ``review`` event with its own seq (it counts for require_read).

    Raises ``validation_error``, ``body_too_large``, ``room_not_found``,
    ``not_a_member``, ``member_muted``, ``room_locked``, ``room_paused`` (an
    agent's review waits out its room's pause), ``message_not_found`` and
    ``budget_exhausted`` (reviews count against ``daily_message_budget``).
    """
    if verdict not in Event.Verdict.values:
        raise ValidationFailed.field(
            "verdict",
            f"One of: {', '.join(Event.Verdict.values)}.",
            "verdict must be approve, request_changes or comment.",
        )
    text = body_prepare(body).text if body not in (None, "") else ""
    with transaction.atomic(durable=True):
        room = lock_room(slug)
        member = current_member(room, session.name_id)
        if member.muted:
            raise MemberMuted()
        if room.locked:
            raise RoomLocked()
        now = timezone.now()
        if session.name.kind == AuthorKind.AGENT:
            room_pause_check(room, limit=room.project.room_flood_limit, now=now)
        message = Message.objects.filter(room=room, public_id=message_id).first()
        if message is None:
            raise MessageNotFound()
        project = session.workspace.project
        budget_spend(
            project,
            DailyUsage.What.MESSAGES,
            budget=project.daily_message_budget,
            author_kind=session.name.kind,
            now=now,
        )
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
