"""``plumb room|message|member|conversation|note``: the admin's moderation actions,
and the listings that show the ids they take.

Each action calls the very service the admin's action calls, with the
operator as ``cli:<os user>``; the service checks the reason (required to
lock, hide, mute and remove), appends the room's ``moderation`` event and
writes the audit record. Repeating an action already in effect changes and
records nothing, and says so. ``room list``, ``message list`` and ``note
list`` read through the operator selectors, newest first.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from django.core.management.base import CommandParser

from mailbox import selectors as mailbox_selectors
from mailbox import services as mailbox_services
from plumb_site.cli.text import (
    Console,
    first_line,
    operator_name,
    peer_cell,
    positive_number,
    table,
    timestamp,
)
from rooms import selectors, services
from rooms.models import Event, Room


def add_parsers(groups: argparse._SubParsersAction) -> None:
    room = _group(
        groups,
        "room",
        "List rooms; lock or unlock one (sends refused with 423 room_locked), or resume one "
        "that paused itself (423 room_paused).",
    )
    listing = room.add_parser(
        "list", help="Rooms, newest first: slug, project, latest seq, members, state, title."
    )
    listing.add_argument("project", nargs="?", help="Only this project's rooms.")
    _add_limit(listing, 100)
    listing.set_defaults(handler=room_list)
    for action, handler, why in (
        ("lock", room_lock, "Refuse sends and reviews in ROOM; reading goes on."),
        ("unlock", room_unlock, "Let ROOM's members send again."),
        ("resume", room_resume, "Resume ROOM, paused by its flood limit, before its time."),
    ):
        parser = room.add_parser(action, help=why)
        parser.add_argument("room", metavar="ROOM", help="Room slug.")
        _add_reason(parser, required=action == "lock")
        parser.set_defaults(handler=handler)

    message = _group(groups, "message", "List a room's messages; hide or unhide one.")
    listing = message.add_parser(
        "list", help="ROOM's messages, newest first: seq, id, author, state, first line."
    )
    listing.add_argument("room", metavar="ROOM", help="Room slug.")
    _add_limit(listing, 50)
    listing.set_defaults(handler=message_list)
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

    note = _group(groups, "note", "List mailbox notes (who wrote to whom, never what).")
    listing = note.add_parser(
        "list", help="Notes, newest first: id, thread, sender, recipient, delivery state."
    )
    listing.add_argument(
        "project", nargs="?", help="Only notes this project's agents sent or were sent."
    )
    listing.add_argument(
        "--state", choices=list(mailbox_selectors.NOTE_STATES), help="Only notes in this state."
    )
    _add_limit(listing, 100)
    listing.set_defaults(handler=note_list)


def _group(groups: argparse._SubParsersAction, name: str, why: str) -> argparse._SubParsersAction:
    parser = groups.add_parser(name, help=why)
    return parser.add_subparsers(dest="action", required=True, metavar="ACTION")


def _add_limit(parser: CommandParser, default: int) -> None:
    parser.add_argument(
        "--limit",
        type=positive_number,
        default=default,
        metavar="N",
        help=f"At most N, newest first ({default}).",
    )


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


def room_list(out: Console, options: dict[str, Any]) -> None:
    slug = options["project"]
    project = mailbox_selectors.project_get_for_operator(slug) if slug else None
    rows = (
        [
            room.slug,
            room.project.slug,
            str(room.head_seq),
            str(room.members_count),
            _room_state(room),
            timestamp(room.created_at),
            peer_cell(room.title),
        ]
        for room in selectors.room_list_for_operator(project, limit=options["limit"])
    )
    header = ["ROOM", "PROJECT", "LATEST_SEQ", "MEMBERS", "STATE", "CREATED", "TITLE"]
    for line in table(header, rows):
        out.say(line)


def _room_state(room: Room) -> str:
    if room.locked:
        return "locked"
    return "paused" if services.room_paused_now(room) else "open"


def room_resume(out: Console, options: dict[str, Any]) -> None:
    room = selectors.room_get_for_operator(options["room"])
    event = services.room_resume(room, actor=operator_name(), reason=options["reason"])
    out.say(
        _done(event, done=f"Resumed room {room.slug}", already=f"Room {room.slug} is not paused")
    )


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


def message_list(out: Console, options: dict[str, Any]) -> None:
    room = selectors.room_get_for_operator(options["room"])
    rows = (
        [
            str(message.seq),
            message.public_id,
            message.author.handle,
            timestamp(message.created_at),
            "hidden" if message.hidden else "shown",
            first_line(message.body_start),
        ]
        for message in selectors.message_list_for_operator(room, limit=options["limit"])
    )
    header = ["SEQ", "MESSAGE", "AUTHOR", "CREATED", "STATE", "FIRST_LINE"]
    for line in table(header, rows):
        out.say(line)


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


# --- notes ------------------------------------------------------------------------------


def note_list(out: Console, options: dict[str, Any]) -> None:
    slug = options["project"]
    project = mailbox_selectors.project_get_for_operator(slug) if slug else None
    notes = mailbox_selectors.note_list_for_operator(
        project, state=options["state"], limit=options["limit"]
    )
    rows = (
        [
            timestamp(note.created_at),
            note.public_id,
            note.conversation.public_id,
            note.sender_name.workspace.project.slug,
            note.sender_name.handle,
            note.to_display,
            note.state,
            timestamp(note.delivered_at),
        ]
        for note in notes
    )
    header = ["CREATED", "NOTE", "CONVERSATION", "PROJECT", "FROM", "TO", "STATE", "DELIVERED"]
    for line in table(header, rows):
        out.say(line)
