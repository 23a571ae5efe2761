"""Every behaviour of the reference tool descriptions is in the published tool list.

The tools ``leave_note`` and ``send_message`` grew from two tool descriptions
(``reference/`` of the contract); agents act on what those said, so each
sentence is a behaviour someone relies on (SPEC §6). Each behaviour here is
named and pinned by a key phrase, in plumb's own words, that must appear in
the tool as published: its description or one of its arguments'.
"""

from __future__ import annotations

import re

import pytest

from common import limits
from tests.mcp.conftest import published_tools

pytestmark = pytest.mark.django_db

BEHAVIOURS: dict[str, dict[str, tuple[str, ...]]] = {
    "leave_note": {
        "to a named peer or to whoever attaches next": ('or to "next"', "attaches to"),
        "bound to the exact session when it is connected": ("bound to that exact session",),
        "otherwise delivered by name": ("otherwise it waits for the name",),
        "a new thread without conversation_id, whose id comes back": (
            "omit to start one (the result has its id)",
        ),
        "to omitted on a new thread means next": ('Omitted: "next" on a new thread',),
        "to omitted on a reply means the one other participant": (
            "on a reply, the one other participant",
        ),
        "and is refused when there are none or several": ("refused if there are none or several",),
        "delivery by polling, exactly once": ("delivery is by polling, exactly once",),
        "what delivers it": ("check_messages, session_start or any other",),
        "silence is not refusal; do not re-send": (
            "silence is not refusal",
            "do not re-send",
        ),
        "the exchange cap, and refusal once spent": (
            "max_exchanges",
            "exchanges_left",
            "beyond that, notes are refused",
        ),
        "requires the mailbox switch": ("requires the mailbox on",),
        "cross-project sends need the recipient project's opt-in": (
            "for a name in another project, that project's opt-in",
        ),
        "secrets are scrubbed": ("secrets in the body are scrubbed",),
        "the etiquette lives in the plumb-chat skill": ("plumb-chat skill",),
        "idempotent retries": ("a retry with it returns the original",),
    },
    "send_message": {
        "the body limit, from common.limits": (f"max {limits.BODY_MAX_BYTES // 1024} KB",),
        "rooms you joined": ("to a room you have joined",),
        "returns the stored message with its seq": ("returns the stored message with its seq",),
        "@mentions": ("@handle mentions a member",),
        "backticks around @-identifiers in code": (
            "not inside code",
            "@-identifiers of code in backticks",
        ),
        "idempotency: a retry returns the original": ("a retry with it returns the original",),
        "a refused idempotency key is not used up": ("a refused send does not use it up",),
        "latest_seq is the head, counting every event, not unread": (
            "latest_seq is the room head",
            "every event counts, yours too",
            "not an unread signal",
        ),
        "unseen_before_send counts messages; read_messages fetches them": (
            "unseen_before_send counts messages",
            "fetch them with read_messages",
        ),
        "require_read for claims about the room's state": (
            "a claim about the room's state (status, round, verdict, who owns what)",
        ),
        "a refusal posts nothing and lists the unread events": (
            "unread_messages, listing them; nothing posted",
        ),
        "the reference is after_seq, else the read position": (
            "follow after_seq (or your read position)",
            "instead of your read position",
        ),
        "read them, then send again": ("read them, then send again",),
        "unresolved mentions, as typed": ("unresolved_mentions", "as typed"),
        "invisible characters: check the resolved mentions": (
            "invisible characters",
            "check the resolved mentions",
        ),
    },
}

DESCRIBED_ARGUMENTS = {
    "leave_note": ("to", "conversation_id", "idempotency_key"),
    "send_message": ("require_read", "after_seq", "idempotency_key"),
}


def _text(tool: dict) -> str:
    """What an agent reads of a tool: its description and its arguments', one spacing."""
    parts = [tool["description"]]
    for argument in tool["inputSchema"]["properties"].values():
        parts.append(argument.get("description", ""))
    return re.sub(r"\s+", " ", " ".join(parts)).casefold()


@pytest.mark.parametrize(
    ("tool", "behaviour", "phrases"),
    [
        (tool, behaviour, phrases)
        for tool, behaviours in BEHAVIOURS.items()
        for behaviour, phrases in behaviours.items()
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_the_published_tool_carries_the_reference_behaviour(tool, behaviour, phrases, project_key):
    text = _text(published_tools(project_key)[tool])

    missing = [phrase for phrase in phrases if phrase.casefold() not in text]

    assert not missing, f"{tool}: {behaviour!r} is not said (missing {missing})"


@pytest.mark.parametrize(
    ("tool", "argument"),
    [(tool, argument) for tool, arguments in DESCRIBED_ARGUMENTS.items() for argument in arguments],
)
def test_arguments_that_change_behaviour_are_described(tool, argument, project_key):
    schema = published_tools(project_key)[tool]["inputSchema"]["properties"][argument]

    assert len(schema.get("description", "")) > 20
