"""The tools: each a thin call into the same services, selectors and serializers as REST.

A tool call answers the JSON its REST endpoint answers, in ``structuredContent``
and as text (with peer text framed as data, ``framing``), with the same
envelope (``notes``, ``schema_stale``). A domain
error is an ``isError`` result carrying the REST error object, rendered by the
same exception handler, so its ``code`` is the REST code. As on REST, notes
are delivered on successful results only (SPEC §3.4), never on an error.

The waiting tools (``check_messages``, ``read_messages`` and ``list_sent_notes``
with ``wait``, ``wait_for_activity``) hold the ``POST /mcp`` request while
they wait, through the same services as REST, so one rule
(``mailbox/wakeups.py``) covers both doors: a session's newer waiting call,
REST or MCP, ends its older one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from rest_framework import exceptions as drf

from common.errors import PlumbError, exception_handler
from common.validation import FINGERPRINT_FIELD, validated
from mailbox import callers
from mailbox import representation as mailbox_json
from mailbox import selectors as mailbox_selectors
from mailbox import services as mailbox_services
from mailbox.api import serializers as mailbox_io
from mailbox.api.envelope import envelope
from mailbox.models import Session
from plumb_site.mcp import framing
from plumb_site.mcp.schemas import TOOLS_BY_NAME, check_arguments
from rooms import representation as room_json
from rooms import selectors as room_selectors
from rooms import services as room_services
from rooms.api import serializers as room_io
from rooms.models import Event
from rooms.selectors.search import search_asked


class UnknownTool(Exception):
    """A tools/call naming no tool: a protocol error (-32602), not a tool result."""


def call_tool(
    caller: callers.Caller, name: str, arguments: dict[str, Any], header_fingerprint: str | None
) -> tuple[dict[str, Any], int]:
    """Run one tool for ``caller``; returns the ``CallToolResult`` fields and the
    status REST would have answered (for the request metrics: a domain error is
    a successful JSON-RPC response, but the 409 it stands for is what counts).

    Authentication and rate-limit refusals (DRF ``AuthenticationFailed`` and
    ``Throttled``) propagate: they are answered at the HTTP level, like REST.
    """
    tool = TOOLS_BY_NAME.get(name)
    if tool is None:
        raise UnknownTool(name)
    fingerprint = arguments.get(FINGERPRINT_FIELD)
    if not isinstance(fingerprint, str) or not fingerprint:
        fingerprint = header_fingerprint
    session: Session | None = None
    try:
        checked = check_arguments(tool, arguments)
        if name == "session_start":
            session, payload = _session_start(caller, checked)
        else:
            session, _ = callers.caller_session(caller)
            payload = _HANDLERS[name](session, checked)
        is_error, status = False, 200
    except (PlumbError, drf.ValidationError) as exc:
        refusal = exception_handler(exc, {"view": None})
        payload, is_error, status = dict(refusal.data), True, refusal.status_code
    envelope(payload, session=session, fingerprint=fingerprint, success=not is_error)
    # DRF's output may hold types plain json refuses: encoded once, read back as JSON.
    encoded = json.dumps(payload, cls=DjangoJSONEncoder, ensure_ascii=False)
    structured = json.loads(encoded)
    return {
        # Peer text framed as data (SPEC §3.7); the structured form keeps it as stored.
        "content": [{"type": "text", "text": framing.render(structured, encoded=encoded)}],
        "structuredContent": structured,
        "isError": is_error,
    }, status


# --- sessions and the mailbox ------------------------------------------------------


def _session_start(caller: callers.Caller, args: dict) -> tuple[Session, dict]:
    """Resume or start the session this connection acts as (``callers.caller_session``).

    ``token`` is set only when this call started the session, the one moment
    it exists in clear.
    """
    session, started = callers.caller_session(
        caller, workspace=args.get("workspace"), name=args.get("name")
    )
    return session, {
        "session": mailbox_json.session_json(session),
        "token": started.token if started is not None else None,
    }


def _leave_note(session: Session, args: dict) -> dict:
    data = validated(mailbox_io.NoteLeaveInput, args)
    left = mailbox_services.note_leave(session, **data)
    return mailbox_json.note_left_body(left)


def _check_messages(session: Session, args: dict) -> dict:
    wait = validated(mailbox_io.NotesCheckInput, args)["wait"]
    notes = mailbox_services.notes_wait(session, wait=wait)
    return {"notes": mailbox_json.notes_json(notes)}


def _list_sent_notes(session: Session, args: dict) -> dict:
    query = validated(mailbox_io.NotesSentInput, args)
    notes, has_more = mailbox_services.notes_sent_wait(session, **query)
    return mailbox_json.notes_sent_body(notes, has_more)


def _list_conversations(session: Session, args: dict) -> dict:
    threads, has_more = mailbox_selectors.conversation_list_for_session(
        session, **validated(mailbox_io.ConversationListInput, args)
    )
    return mailbox_json.conversation_list_body(threads, has_more)


def _read_conversation(session: Session, args: dict) -> dict:
    conversation = mailbox_selectors.conversation_get_for_session(session, args["conversation_id"])
    return mailbox_json.conversation_detail_body(conversation)


# --- rooms ---------------------------------------------------------------------------


def _room_event(
    session: Session,
    slug: str,
    event: Event | None,
    room=None,
    *,
    scrubbed: list[dict] | None = None,
) -> dict:
    # Re-read through the visibility rule for the caller's annotations, except
    # after a leave: another project's room is no longer visible then.
    room = room or room_selectors.room_get_for_session(session, slug)
    return room_json.room_event_body(room, event, scrubbed=scrubbed)


def _list_rooms(session: Session, args: dict) -> dict:
    rooms, has_more = room_selectors.room_list_for_session(
        session, **validated(room_io.RoomListInput, args)
    )
    return room_json.room_list_body(rooms, has_more)


def _create_room(session: Session, args: dict) -> dict:
    fields = validated(room_io.RoomCreateInput, args)
    created = room_services.room_create(session, **fields)
    return _room_event(session, created.room.slug, created.event, scrubbed=created.scrubbed)


def _join_room(session: Session, args: dict) -> dict:
    data = validated(room_io.RoomJoinInput, {k: v for k, v in args.items() if k != "room"})
    joined = room_services.room_join(session, args["room"], display_name=data.get("display_name"))
    return _room_event(session, args["room"], joined.event, scrubbed=joined.scrubbed)


def _leave_room(session: Session, args: dict) -> dict:
    room, event = room_services.room_leave(session, args["room"])
    return _room_event(session, args["room"], event, room=room)


def _send_message(session: Session, args: dict) -> dict:
    fields = validated(room_io.MessageSendInput, {k: v for k, v in args.items() if k != "room"})
    sent = room_services.message_send(session, args["room"], **fields)
    return room_json.message_sent_body(sent)


def _read_messages(session: Session, args: dict) -> dict:
    query = {k: v for k, v in args.items() if k != "room"}
    if "kinds" in query:
        # REST takes kinds as a comma-separated string; the tool takes a list.
        query["kinds"] = ",".join(query["kinds"])
    read = room_services.events_read(
        session, args["room"], **validated(room_io.EventsReadInput, query)
    )
    return room_json.events_read_body(read)


def _review_message(session: Session, args: dict) -> dict:
    data = validated(room_io.ReviewInput, {k: args[k] for k in ("verdict", "body") if k in args})
    room, event = room_services.review_add(
        session,
        args["room"],
        args["message_id"],
        verdict=data["verdict"],
        body=data.get("body"),
    )
    return room_json.review_body(room, event)


def _mark_read(session: Session, args: dict) -> dict:
    seq = validated(room_io.ReadInput, {"seq": args["seq"]})["seq"]
    room, member = room_services.read_position_set(session, args["room"], seq=seq)
    return room_json.read_position_body(room, member)


def _wait_for_activity(session: Session, args: dict) -> dict:
    wait = validated(room_io.ActivityInput, args)["wait"]
    return room_json.activity_body(room_services.activity_wait(session, wait=wait))


# --- search (SPEC §9) ------------------------------------------------------------------


def _search(session: Session, args: dict) -> dict:
    query = validated(room_io.SearchInput, args)
    page = search_asked(session, query)
    return room_json.search_body(page)


_HANDLERS: dict[str, Callable[[Session, dict], dict]] = {
    "leave_note": _leave_note,
    "check_messages": _check_messages,
    "list_conversations": _list_conversations,
    "read_conversation": _read_conversation,
    "list_rooms": _list_rooms,
    "create_room": _create_room,
    "join_room": _join_room,
    "leave_room": _leave_room,
    "send_message": _send_message,
    "read_messages": _read_messages,
    "review_message": _review_message,
    "mark_read": _mark_read,
    "wait_for_activity": _wait_for_activity,
    "list_sent_notes": _list_sent_notes,
    "search": _search,
}
