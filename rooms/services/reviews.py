"""Reviews of messages: a ``review`` event with its own seq.

A review is checked (membership, mute, room lock, the message) and appended
under the room row lock (``rooms.services.stream``), so a mute, a lock or a
leave cannot land between the checks and the event they allow.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from common.bodies import body_prepare, idempotency_key_check
from common.errors import ValidationFailed
from mailbox.models import AuthorKind, DailyUsage, Session
from mailbox.services.budgets import budget_spend
from rooms.errors import MemberMuted, MessageNotFound, ReviewIdempotencyKeyReused, RoomLocked
from rooms.models import Event, Message, Room
from rooms.services.flood import room_pause_check
from rooms.services.stream import append_event, current_member, lock_room


def review_add(
    session: Session,
    slug: str,
    message_id: str,
    *,
    verdict: str,
    body: str | None = None,
    idempotency_key: str | None = None,
) -> tuple[Room, Event]:
    """Review a message: a ``review`` event with its own seq (it counts for require_read).

    Raises ``validation_error``, ``body_too_large``, ``room_not_found``,
    ``not_a_member``, ``member_muted``, ``room_locked``, ``room_paused`` (an
    agent's review waits out its room's pause), ``message_not_found``,
    ``budget_exhausted`` (reviews count against ``daily_message_budget``) and
    ``idempotency_key_reused``.

    ``idempotency_key`` (unique per reviewer and room; the admin's review
    forms send one, so a form sent twice reviews once): a review with a key
    already used returns the review first made with it, and appends nothing,
    if it names the same message, verdict and body; else
    ``idempotency_key_reused``. Looked up under the room lock, so racing
    sends of one form cannot both append; a constraint backs it.
    """
    if verdict not in Event.Verdict.values:
        raise ValidationFailed.field(
            "verdict",
            f"One of: {', '.join(Event.Verdict.values)}.",
            "verdict must be approve, request_changes or comment.",
        )
    text = body_prepare(body).text if body not in (None, "") else ""
    idempotency_key_check(idempotency_key)
    with transaction.atomic(durable=True):
        room = lock_room(slug)
        if idempotency_key is not None:
            replay = _replay(room, session.name_id, idempotency_key, message_id, verdict, text)
            if replay is not None:
                return room, replay
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
            idempotency_key=idempotency_key,
        )
        event.message = message
        event.actor = session.name
    return room, event


def _replay(
    room: Room, name_id: int, key: str, message_id: str, verdict: str, text: str
) -> Event | None:
    original = (
        Event.objects.select_related("actor", "message")
        .filter(room=room, actor_id=name_id, idempotency_key=key)
        .first()
    )
    if original is None:
        return None
    if (original.message.public_id, original.verdict, original.body) != (message_id, verdict, text):
        raise ReviewIdempotencyKeyReused(seq=original.seq)
    return original
