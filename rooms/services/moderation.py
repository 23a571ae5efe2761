"""Moderation of rooms: hide messages, mute and remove members, lock rooms.

Each action is a ``moderation`` event in the room's stream (agents see that
something happened, and why) and an audit record naming the operator (only
operators see who). Repeating an action that is already in effect changes
nothing and records nothing.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from common.pause import pause_point
from mailbox.models import AuthorKind, Project
from mailbox.selectors import optin_allows
from mailbox.services.audit import audit_record, reason_check
from rooms.models import Event, Member, Message, Room
from rooms.services.stream import append_event, lock_room

OPTIN_REVOKED_REASON = "opt-in revoked"


def _moderate(
    room: Room,
    *,
    action: str,
    actor: str,
    reason: str,
    target: str,
    message: Message | None = None,
    member: str | None = None,
) -> Event:
    """Append the moderation event and its audit record; caller holds the room lock."""
    data = {"action": action, "reason": reason}
    if member is not None:
        data["member"] = member
    event = append_event(room, kind=Event.Kind.MODERATION, message=message, data=data)
    audit_record(
        actor=actor,
        action=f"room.{action}",
        project=room.project,
        room_slug=room.slug,
        target=target,
        reason=reason,
    )
    pause_point("moderation.changed")
    return event


def message_hide(message: Message, *, actor: str, reason: str) -> Event | None:
    """Hide a message from agents (its body is never served again); reason required."""
    reason = reason_check(reason, required=True)
    return _message_change(
        message,
        action="hide",
        actor=actor,
        reason=reason,
        update={"hidden_at": timezone.now(), "hidden_reason": reason},
        when={"hidden_at__isnull": True},
    )


def message_unhide(message: Message, *, actor: str, reason: str = "") -> Event | None:
    reason = reason_check(reason, required=False)
    return _message_change(
        message,
        action="unhide",
        actor=actor,
        reason=reason,
        update={"hidden_at": None, "hidden_reason": ""},
        when={"hidden_at__isnull": False},
    )


def member_mute(member: Member, *, actor: str, reason: str) -> Event | None:
    """Stop a member from sending and reviewing (``403 member_muted``); reason required."""
    reason = reason_check(reason, required=True)
    return _member_change(
        member,
        action="mute",
        actor=actor,
        reason=reason,
        update={"muted_at": timezone.now()},
        when={"muted_at__isnull": True},
    )


def member_unmute(member: Member, *, actor: str, reason: str = "") -> Event | None:
    reason = reason_check(reason, required=False)
    return _member_change(
        member,
        action="unmute",
        actor=actor,
        reason=reason,
        update={"muted_at": None},
        when={"muted_at__isnull": False},
    )


def member_remove(member: Member, *, actor: str, reason: str) -> Event | None:
    """Take a member out of the room; it may join again unless the room is locked."""
    reason = reason_check(reason, required=True)
    return _member_change(
        member,
        action="remove",
        actor=actor,
        reason=reason,
        update={"left_at": timezone.now()},
        when={"left_at__isnull": True},
    )


def members_remove_for_revoked_optin(
    project: Project, *, source: Project | None, actor: str
) -> int:
    """Remove ``source``'s agents from every room of ``project`` that no longer accepts them.

    ``source=None`` (``accept_all_projects`` turned off): every other
    project's agents whose project ``project`` has no opt-in for.

    Run by ``optin_revoke`` (through the ``optin_revoked`` signal) inside its
    transaction, after the opt-in row is deleted. If ``project`` still
    accepts ``source`` (``accept_all_projects``; the same ``optin_allows``
    rule as ``room_join``), nothing changes. Otherwise each current member
    whose name belongs to ``source`` leaves (``left_at``), and its room gets a
    ``moderation`` event, action ``remove``, reason "opt-in revoked", as if
    an operator had removed it: later sends and reads answer
    ``403 not_a_member``. One audit record per removal (``room.remove``,
    under the revoking operator), so each room's trail shows its own; the
    revocation has its record too. People are never removed: no opt-in let
    them in (``room_join``). Returns how many members were removed.

    Race with ``room_join``: every room of ``project`` is locked first
    (``select_for_update``, in id order, so that two revocations for one
    project take the locks in the same order and cannot deadlock; joins,
    sends and moderation lock one room each), then the members are read.
    On PostgreSQL (READ COMMITTED) a join holding a room's lock makes this
    wait until it commits, and the members query, a statement run after the
    lock was granted, sees its member; a join that comes later waits for
    these locks and then reads the opt-in as deleted. All rooms,
    not only those with members of ``source`` now: any room may be in the
    middle of a join. On SQLite the IMMEDIATE transaction already runs
    alone; the locks are ignored there.
    """
    with transaction.atomic():
        rooms = {
            room.pk: room
            for room in Room.objects.select_for_update(of=("self",))
            .select_related("project")
            .filter(project=project)
            .order_by("id")
        }
        pause_point("optin.rooms_locked")
        # Read again under the locks: the caller's copy may predate a change.
        current = Project.objects.get(pk=project.pk)
        if not rooms or (source is not None and optin_allows(current, source=source)):
            return 0
        members = (
            Member.objects.filter(room_id__in=list(rooms), left_at__isnull=True)
            .exclude(name__workspace__project=project)
            # people: no opt-in let them in, so none revoked takes them out.
            .exclude(name__kind=AuthorKind.HUMAN)
            .select_related("name__workspace__project")
            .order_by("room_id", "id")
        )
        if source is not None:
            members = members.filter(name__workspace__project=source)
        allowed: dict[int, bool] = {}
        now = timezone.now()
        removed = 0
        for member in members:
            their_project = member.name.workspace.project
            if their_project.pk not in allowed:
                allowed[their_project.pk] = optin_allows(current, source=their_project)
            if allowed[their_project.pk]:
                continue
            # Conditional, like every moderation change; under the lock it always applies.
            if not Member.objects.filter(pk=member.pk, left_at__isnull=True).update(left_at=now):
                continue
            handle = member.name.handle
            _moderate(
                rooms[member.room_id],
                action="remove",
                actor=actor,
                reason=OPTIN_REVOKED_REASON,
                target=f"member {handle}",
                member=handle,
            )
            removed += 1
        return removed


def _member_change(member: Member, **change) -> Event | None:
    handle = member.name.handle
    return _change(member, target=f"member {handle}", member=handle, **change)


def _message_change(message: Message, **change) -> Event | None:
    target = f"message {message.public_id} (seq {message.seq})"
    return _change(message, target=target, message=message, **change)


def _change(
    obj: Member | Message,
    *,
    action: str,
    actor: str,
    reason: str,
    update: dict,
    when: dict,
    target: str,
    **event_fields,
) -> Event | None:
    """Apply a moderation state change to a message or member, under the room lock."""
    with transaction.atomic():
        room = lock_room(obj.room.slug)
        # Conditional UPDATE: the action applies only if its state is not in effect.
        if not type(obj).objects.filter(pk=obj.pk, **when).update(**update):
            return None
        return _moderate(
            room, action=action, actor=actor, reason=reason, target=target, **event_fields
        )


def room_lock(room: Room, *, actor: str, reason: str) -> Event | None:
    """Lock a room: sends and reviews get ``423 room_locked``; reading goes on."""
    reason = reason_check(reason, required=True)
    return _room_change(room, locked=True, actor=actor, reason=reason)


def room_unlock(room: Room, *, actor: str, reason: str = "") -> Event | None:
    reason = reason_check(reason, required=False)
    return _room_change(room, locked=False, actor=actor, reason=reason)


def _room_change(room: Room, *, locked: bool, actor: str, reason: str) -> Event | None:
    with transaction.atomic():
        current = lock_room(room.slug)
        if current.locked == locked:
            return None
        Room.objects.filter(pk=current.pk).update(locked_at=timezone.now() if locked else None)
        action = "lock" if locked else "unlock"
        return _moderate(current, action=action, actor=actor, reason=reason, target="room")
