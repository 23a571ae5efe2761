"""``plumb room|message|member|conversation``: the admin's moderation actions.

Each action calls the very service the admin's action calls, with the
operator as ``cli:<os user>``; the service checks the reason (required to
lock, hide, mute and remove), appends the room's ``moderation`` event and
writes the audit record. Repeating an action already in effect changes and
records nothing, and says so.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from django.core.management.base import CommandParser

from mailbox import selectors as mailbox_selectors
from mailbox import services as mailbox_services
from plumb_site.cli.text import Console, operator_name
from rooms import selectors, services
from rooms.models import Event


def add_parsers(groups: argparse._SubParsersAction) -> None:
    room = _group(groups, "room", "Lock or unlock a room (sends refused with 423 room_locked).")
    for action, handler, why in (
        ("lock", room_lock, "Refuse sends and reviews in ROOM; reading goes on."),
        ("unlock", room_unlock, "Let ROOM's members send again."),
    ):
        parser = room.add_parser(action, help=why)
        parser.add_argument("room", metavar="ROOM", help="Room slug.")
        _add_reason(parser, required=action == "lock")
        parser.set_defaults(handler=handler)

    message = _group(groups, "message", "Hide or unhide a room message.")
    for action, handler, why in (
        ("hide", message_hide, "Serve MESSAGE_ID to agents as hidden, without its body."),
        ("unhide", message_unhide, "Serve MESSAGE_ID's body again."),
    ):
        parser = message.add_parser(action, help=why)
        parser.add_argument("message", metavar="MESSAGE_ID", help="The message's id (msg_…).")
        _add_reason(parser, required=action == "hide")
        parser.set_defaults(handler=handler)

    member = _group(groups, "member", "Mute, unmute or remove a room member.")
    for action, handler, why in (
        ("mute", member_mute, "Refuse NAME's sends and reviews in ROOM (403 member_muted)."),
        ("unmute", member_unmute, "Let NAME send in ROOM again."),
        ("remove", member_remove, "Take NAME out of ROOM; it may join again unless locked."),
    ):
        parser = member.add_parser(action, help=why)
        parser.add_argument("room", metavar="ROOM", help="Room slug.")
        parser.add_argument("name", metavar="NAME", help="The member's agent name.")
        _add_reason(parser, required=action != "unmute")
        parser.set_defaults(handler=handler)

    conversation = _group(groups, "conversation", "Lock or unlock a mailbox conversation.")
    for action, handler, why in (
        ("lock", conversation_lock, "Refuse new notes in the thread (409 conversation_locked)."),
        ("unlock", conversation_unlock, "Let the thread's participants write again."),
    ):
        parser = conversation.add_parser(action, help=why)
        parser.add_argument("conversation", metavar="CONVERSATION_ID", help="The thread's id.")
        _add_reason(parser, required=action == "lock")
        parser.set_defaults(handler=handler)


def _group(groups: argparse._SubParsersAction, name: str, why: str) -> argparse._SubParsersAction:
    parser = groups.add_parser(name, help=why)
    return parser.add_subparsers(dest="action", required=True, metavar="ACTION")


def _add_reason(parser: CommandParser, *, required: bool) -> None:
    # Not `required=True` in argparse: the service owns the rule, so a missing
    # reason is the same validation_error (exit 1) the admin and the API report.
    parser.add_argument(
        "--reason",
        default="",
        help="Why; shown in the room's stream and the audit trail"
        + (" (required)." if required else "."),
    )


def _done(event: Event | None, *, done: str, already: str) -> str:
    if event is None:
        return f"{already}; nothing changed."
    return f"{done} (moderation event seq {event.seq})."


# --- rooms ------------------------------------------------------------------------------


def room_lock(out: Console, options: dict[str, Any]) -> None:
    room = selectors.room_get_for_operator(options["room"])
    event = services.room_lock(room, actor=operator_name(), reason=options["reason"])
    out.say(_done(event, done=f"Locked room {room.slug}", already=f"Room {room.slug} is locked"))


def room_unlock(out: Console, options: dict[str, Any]) -> None:
    room = selectors.room_get_for_operator(options["room"])
    event = services.room_unlock(room, actor=operator_name(), reason=options["reason"])
    out.say(
        _done(event, done=f"Unlocked room {room.slug}", already=f"Room {room.slug} is not locked")
    )


# --- messages ---------------------------------------------------------------------------


def message_hide(out: Console, options: dict[str, Any]) -> None:
    message = selectors.message_get_for_operator(options["message"])
    event = services.message_hide(message, actor=operator_name(), reason=options["reason"])
    where = f"message {message.public_id} (seq {message.seq}) in room {message.room.slug}"
    out.say(_done(event, done=f"Hid {where}", already=f"The {where} is hidden"))


def message_unhide(out: Console, options: dict[str, Any]) -> None:
    message = selectors.message_get_for_operator(options["message"])
    event = services.message_unhide(message, actor=operator_name(), reason=options["reason"])
    where = f"message {message.public_id} (seq {message.seq}) in room {message.room.slug}"
    out.say(_done(event, done=f"Unhid {where}", already=f"The {where} is not hidden"))


# --- members ----------------------------------------------------------------------------


def _member_action(
    service: Callable[..., Event | None], *, done: str, already: str, preposition: str = "in"
) -> Callable[[Console, dict[str, Any]], None]:
    """One handler per member action: they differ only in the service and the words."""

    def handler(out: Console, options: dict[str, Any]) -> None:
        room = selectors.room_get_for_operator(options["room"])
        member = selectors.member_get_for_operator(room, options["name"])
        event = service(member, actor=operator_name(), reason=options["reason"])
        who = f"{member.name.handle} {preposition} room {room.slug}"
        out.say(_done(event, done=f"{done} {who}", already=f"{who} {already}"))

    return handler


member_mute = _member_action(services.member_mute, done="Muted", already="is muted")
member_unmute = _member_action(services.member_unmute, done="Unmuted", already="is not muted")
member_remove = _member_action(
    services.member_remove, done="Removed", already="was removed already", preposition="from"
)


# --- conversations ----------------------------------------------------------------------


def conversation_lock(out: Console, options: dict[str, Any]) -> None:
    conversation = mailbox_selectors.conversation_get_for_operator(options["conversation"])
    changed = mailbox_services.conversation_lock(
        conversation, actor=operator_name(), reason=options["reason"]
    )
    what = f"conversation {conversation.public_id}"
    out.say(f"Locked {what}." if changed else f"The {what} is locked; nothing changed.")


def conversation_unlock(out: Console, options: dict[str, Any]) -> None:
    conversation = mailbox_selectors.conversation_get_for_operator(options["conversation"])
    changed = mailbox_services.conversation_unlock(
        conversation, actor=operator_name(), reason=options["reason"]
    )
    what = f"conversation {conversation.public_id}"
    out.say(f"Unlocked {what}." if changed else f"The {what} is not locked; nothing changed.")
