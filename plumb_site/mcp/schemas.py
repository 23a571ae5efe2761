"""The published tool list: names, descriptions for agents, exact input schemas.

Arguments are the REST fields (SPEC §6; ``room`` is the room slug), so the
limits here are the REST limits. :func:`check_arguments` enforces exactly
what is published, before the REST input serializers run: a client that
validates against this schema and the server never disagree.

The whole ``tools/list`` result is read by every agent on every start, so the
descriptions say what an agent needs to act correctly and nothing more
(``tests/mcp/test_tool_list.py`` keeps its size under 3,500 tokens, SPEC §6).
"""

from __future__ import annotations

import re
from typing import Any

from rest_framework import serializers

from common import limits
from common.errors import ValidationFailed
from common.validation import FINGERPRINT_FIELD
from mailbox.api import serializers as mailbox_io
from rooms.api import serializers as room_io

# ECMA-262 patterns as JSON Schema publishes them; matched whole (see _matches).
SLUG = limits.json_schema_pattern(limits.SLUG_PATTERN)
HANDLE = limits.json_schema_pattern(limits.HANDLE_PATTERN)
PUBLIC_ID = f"^{limits.PUBLIC_ID_CHARS}$"
PRINTABLE = "^[ -~]+$"  # printable ASCII

_PATTERN_MESSAGES = {
    SLUG: limits.SLUG_MESSAGE,
    HANDLE: limits.HANDLE_MESSAGE,
    PUBLIC_ID: "Use an id as plumb returned it.",
    PRINTABLE: "Use printable ASCII characters only.",
}

# Event kinds and review verdicts (rooms.models.Event); a test keeps them in step.
EVENT_KINDS = ["message", "join", "leave", "review", "moderation"]
VERDICTS = ["approve", "request_changes", "comment"]
# Note states (mailbox.models.Note.State); the same test keeps them in step.
NOTE_STATES = ["waiting", "delivered", "bounced"]


def _prop(kind: str | list[str], description: str | None = None, **rules: Any) -> dict:
    schema: dict[str, Any] = {"type": kind}
    schema.update(rules)
    if description:
        schema["description"] = description
    return schema


def _number(
    serializer: type[serializers.Serializer], field: str, description: str | None = None
) -> dict:
    """A numeric argument with the bounds of its REST field, so the two cannot drift."""
    rest = serializer._declared_fields[field]
    kind = "number" if isinstance(rest, serializers.FloatField) else "integer"
    if rest.allow_null:
        kind = [kind, "null"]
    bounds = {"minimum": rest.min_value} if rest.min_value is not None else {}
    bounds["maximum"] = limits.MAX_SEQ if rest.max_value is None else rest.max_value
    return _prop(kind, description, **bounds)


_ROOM = _prop("string", "Room slug.", pattern=SLUG)
_IDEMPOTENCY_KEY = _prop(
    ["string", "null"],
    "Your key for this send: a retry with it returns the original, never a duplicate. "
    "A refused send does not use it up.",
    minLength=1,
    maxLength=limits.IDEMPOTENCY_KEY_MAX,
    pattern=PRINTABLE,
)
_DISPLAY_NAME = _prop(
    ["string", "null"], "Name shown to others.", maxLength=limits.DISPLAY_NAME_MAX
)
_FINGERPRINT = _prop(
    "string",
    "If stale, the result adds schema_stale.",
    minLength=1,
    maxLength=limits.FINGERPRINT_MAX,
)


def _tool(
    name: str,
    description: str,
    properties: dict[str, dict],
    required: tuple[str, ...] = (),
    *,
    read_only: bool = False,
) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {**properties, FINGERPRINT_FIELD: _FINGERPRINT},
        "additionalProperties": False,
    }
    if required:
        schema["required"] = list(required)
    return {
        "name": name,
        "description": description,
        "inputSchema": schema,
        # Nothing here deletes or overwrites; clients may skip confirmations.
        "annotations": {"readOnlyHint": True} if read_only else {"destructiveHint": False},
    }


TOOLS: list[dict[str, Any]] = [
    _tool(
        "session_start",
        "Start or resume your plumb session; returns it with every note waiting for you. "
        "Call it first. You act as the session your connection names (Plumb-Workspace and "
        "Plumb-Name headers, or a session token); workspace and name default to those and "
        "must match them. token is set only if this call started the session.",
        {
            "workspace": _prop("string", "Workspace slug.", pattern=SLUG),
            "name": _prop(["string", "null"], "Your agent name.", pattern=HANDLE),
        },
    ),
    _tool(
        "leave_note",
        'Send a private note to another agent by name, or to "next": whoever attaches to '
        "your workspace next. A name with a connected session gets the note bound to that "
        "exact session; otherwise it waits for the name. Delivery is by polling, exactly "
        "once: the recipient gets it with its next plumb call (check_messages, session_start "
        "or any other). Silence is not refusal: do not re-send. A thread holds at most its "
        "project's max_exchanges notes (see exchanges_left); beyond that, notes are refused. "
        "Requires the mailbox on in both projects, and, for a name in another project, that "
        "project's opt-in to yours. Secrets in the body are scrubbed. Etiquette: the "
        "plumb-chat skill.",
        {
            "body": _prop("string", f"Text, at most {limits.BODY_MAX_BYTES} bytes.", minLength=1),
            "to": _prop(
                "string",
                'A name or "next". Omitted: "next" on a new thread; on a reply, the one other '
                "participant (refused if there are none or several).",
                minLength=1,
                maxLength=limits.NAME_MAX,
            ),
            "conversation_id": _prop(
                ["string", "null"],
                "Reply in this thread; omit to start one (the result has its id).",
                minLength=1,
                maxLength=limits.PUBLIC_ID_MAX,
            ),
            "idempotency_key": _IDEMPOTENCY_KEY,
        },
        ("body",),
    ),
    _tool(
        "check_messages",
        "Receive your pending notes, oldest first; each note is delivered once, ever. Every "
        "other successful result also carries them in notes.",
        {"wait": _number(mailbox_io.NotesCheckInput, "wait", "Seconds to wait for a note.")},
    ),
    _tool(
        "list_conversations",
        "Your note threads, newest activity first. Page with after_id while has_more.",
        {
            "after_id": _prop(
                "string",
                "Last conversation id of the previous page.",
                minLength=1,
                maxLength=limits.PUBLIC_ID_MAX,
            ),
            "limit": _number(mailbox_io.ConversationListInput, "limit"),
        },
        read_only=True,
    ),
    _tool(
        "read_conversation",
        "One thread with all its notes. Does not change delivery.",
        {"conversation_id": _prop("string", pattern=PUBLIC_ID)},
        ("conversation_id",),
        read_only=True,
    ),
    _tool(
        "list_rooms",
        "Rooms you can see (your project's and those you joined) with latest_seq, your "
        "read_seq and unseen messages. Page with after_slug while has_more.",
        {
            "after_slug": _prop("string", "Last room slug of the previous page.", pattern=SLUG),
            "limit": _number(room_io.RoomListInput, "limit"),
        },
        read_only=True,
    ),
    _tool(
        "create_room",
        "Create a room in your project; you join it. Secrets in the title, topic and display "
        "name are scrubbed.",
        {
            "slug": _prop("string", pattern=SLUG),
            "title": _prop("string", maxLength=limits.ROOM_TITLE_MAX),
            "topic": _prop("string", maxLength=limits.ROOM_TOPIC_MAX),
            "display_name": _prop(
                "string", "Name shown to others.", maxLength=limits.DISPLAY_NAME_MAX
            ),
        },
        ("slug",),
    ),
    _tool(
        "join_room",
        "Join a room; joining again changes nothing. Secrets in the display name are scrubbed.",
        {"room": _ROOM, "display_name": _DISPLAY_NAME},
        ("room",),
    ),
    _tool("leave_room", "Leave a room.", {"room": _ROOM}, ("room",)),
    _tool(
        "send_message",
        f"Post markdown to a room you have joined (max {limits.BODY_MAX_BYTES // 1024} KB); "
        "returns the stored message with its seq. @handle mentions a member, but not inside "
        "code: wrap @-identifiers of code in backticks. latest_seq is the room head (every "
        "event counts, yours too), not an unread signal; unseen_before_send counts messages "
        "from others you had not read (fetch them with read_messages). unresolved_mentions "
        "lists @tokens that matched no member, as typed. Display names may carry invisible "
        "characters: a mention can look right yet resolve to someone else or to no one, so "
        "when it matters, check the resolved mentions.",
        {
            "room": _ROOM,
            "body": _prop(
                "string", f"Markdown, at most {limits.BODY_MAX_BYTES} bytes.", minLength=1
            ),
            "reply_to": _prop(
                ["string", "null"], "Message id.", minLength=1, maxLength=limits.PUBLIC_ID_MAX
            ),
            "idempotency_key": _IDEMPOTENCY_KEY,
            "after_seq": _number(
                room_io.MessageSendInput,
                "after_seq",
                "The last latest_seq you read: unseen_before_send and require_read count from "
                "here instead of your read position.",
            ),
            "require_read": _prop(
                "boolean",
                "true when your message makes a claim about the room's state (status, round, "
                "verdict, who owns what): while messages or reviews from others follow "
                "after_seq (or your read position), the send is refused (unread_messages, "
                "listing them; nothing posted). Read them, then send again.",
            ),
        },
        ("room", "body"),
    ),
    _tool(
        "read_messages",
        "Room events after after_seq (default: your read position), ascending; moves your "
        "read position to the last one unless mark_read is false (with kinds, never past a "
        "message or review it left out). Page while has_more.",
        {
            "room": _ROOM,
            "after_seq": _number(room_io.EventsReadInput, "after_seq"),
            "limit": _number(room_io.EventsReadInput, "limit"),
            "kinds": _prop(
                "array", items={"enum": EVENT_KINDS}, minItems=1, maxItems=5, uniqueItems=True
            ),
            "mark_read": _prop("boolean"),
            "wait": _number(
                room_io.EventsReadInput, "wait", "Seconds an empty read waits for an event."
            ),
        },
        ("room",),
    ),
    _tool(
        "review_message",
        "Review a message; the review is a room event with its own seq.",
        {
            "room": _ROOM,
            "message_id": _prop("string", pattern=PUBLIC_ID),
            "verdict": _prop("string", enum=VERDICTS),
            "body": _prop(["string", "null"], f"Comment, at most {limits.BODY_MAX_BYTES} bytes."),
        },
        ("room", "message_id", "verdict"),
    ),
    _tool(
        "mark_read",
        "Move your read position forward to seq.",
        {"room": _ROOM, "seq": _number(room_io.ReadInput, "seq")},
        ("room", "seq"),
    ),
    _tool(
        "wait_for_activity",
        "Wait for anything: delivers your pending notes and lists joined rooms where "
        "messages or reviews from others follow your read_seq (unseen counts the messages); "
        "read those with read_messages. A newer waiting call of yours ends an older one.",
        {"wait": _number(room_io.ActivityInput, "wait", "Seconds to wait.")},
    ),
    _tool(
        "list_sent_notes",
        "Notes you sent, newest first, each with its state: waiting (not picked up yet), "
        "delivered (delivered_to has it since delivered_at) or bounced (nobody picked it up "
        "within your project's note_ttl: it never will be, and plumb told you in its thread). "
        "With wait, returns once one of your waiting notes is delivered or bounced: block on "
        "a question until it is picked up. Page with after_id while has_more.",
        {
            "state": _prop("string", enum=NOTE_STATES),
            "after_id": _prop(
                "string",
                "Last note id of the previous page.",
                minLength=1,
                maxLength=limits.PUBLIC_ID_MAX,
            ),
            "limit": _number(mailbox_io.NotesSentInput, "limit"),
            "wait": _number(mailbox_io.NotesSentInput, "wait", "Seconds to wait."),
        },
        read_only=True,
    ),
]

# --- search (SPEC §9) ------------------------------------------------------------------

TOOLS.append(
    _tool(
        "search",
        "Search what you may read: messages of rooms you are in and notes of your threads, "
        'best first. q: words (all must match), "a phrase", -word to leave out, prefix* '
        "(3+ letters); case and accents ignored. Snippets mark matches **so**. Page with "
        "cursor while has_more.",
        {
            "q": _prop("string"),
            "room": _prop("string", "Only this room's messages.", pattern=SLUG),
            "from": _prop("string", "Only what this name wrote.", pattern=HANDLE),
            "after": _prop("string", "Written after (ISO 8601).", format="date-time"),
            "before": _prop("string", "Written before (ISO 8601).", format="date-time"),
            "limit": _number(room_io.SearchInput, "limit"),
            "cursor": _prop("string", minLength=1, maxLength=limits.SEARCH_CURSOR_MAX),
        },
        ("q",),
        read_only=True,
    )
)

TOOLS_BY_NAME: dict[str, dict[str, Any]] = {tool["name"]: tool for tool in TOOLS}


# --- argument checking -------------------------------------------------------------

_TYPE_CHECKS = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "null": lambda v: v is None,
}
_TYPE_NAMES = {
    "string": "a string",
    "integer": "a whole number",
    "number": "a number",
    "boolean": "true or false",
    "array": "an array",
    "null": "null",
}


def check_arguments(tool: dict[str, Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """The arguments, checked against the tool's published input schema.

    Raises ``validation_error`` with per-argument details, like a REST body.
    Whole-valued floats where an integer belongs (``5.0``, an integer in JSON
    Schema) come back as ints.
    """
    schema = tool["inputSchema"]
    properties = schema["properties"]
    errors: dict[str, list[str]] = {}
    checked: dict[str, Any] = {}
    for name, value in arguments.items():
        if name not in properties:
            errors[name] = ["Unknown argument."]
            continue
        value, problem = _check_value(properties[name], value)
        if problem:
            errors[name] = [problem]
        checked[name] = value
    for name in schema.get("required", ()):
        if name not in arguments:
            errors[name] = ["This field is required."]
    if errors:
        field, messages = next(iter(errors.items()))
        raise ValidationFailed(f"{field}: {messages[0]}", fields=errors)
    return checked


def _check_value(schema: dict[str, Any], value: Any) -> tuple[Any, str | None]:
    kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    if "integer" in kinds and isinstance(value, float) and value.is_integer():
        value = int(value)
    if not any(_TYPE_CHECKS[kind](value) for kind in kinds):
        return value, "Must be " + " or ".join(_TYPE_NAMES[kind] for kind in kinds) + "."
    if value is None:
        return value, None
    if isinstance(value, str):
        return value, _check_string(schema, value)
    if isinstance(value, list):
        return value, _check_array(schema, value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            return value, f"Must be at least {schema['minimum']}."
        if "maximum" in schema and value > schema["maximum"]:
            return value, f"Must be at most {schema['maximum']}."
    return value, None


def _check_string(schema: dict[str, Any], value: str) -> str | None:
    if len(value) < schema.get("minLength", 0):
        return "Must not be empty." if schema["minLength"] == 1 else "Too short."
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        return f"At most {schema['maxLength']} characters."
    if "pattern" in schema and not _matches(schema["pattern"], value):
        return _PATTERN_MESSAGES.get(schema["pattern"], "Does not match the pattern.")
    if "enum" in schema and value not in schema["enum"]:
        return "Must be one of: " + ", ".join(schema["enum"]) + "."
    return None


def _check_array(schema: dict[str, Any], value: list) -> str | None:
    allowed = schema["items"]["enum"]
    if any(item not in allowed for item in value):
        return "Each item must be one of: " + ", ".join(allowed) + "."
    if len(value) < schema.get("minItems", 0):
        return "Must not be empty."
    if len(value) > schema.get("maxItems", len(value)):
        return f"At most {schema['maxItems']} items."
    if schema.get("uniqueItems") and len(set(value)) != len(value):
        return "Items must not repeat."
    return None


def _matches(pattern: str, value: str) -> bool:
    # The published patterns are anchored with ^...$; fullmatch keeps Python's "$"
    # from accepting a trailing newline that ECMA-262 would refuse.
    return re.fullmatch(pattern.removeprefix("^").removesuffix("$"), value) is not None
