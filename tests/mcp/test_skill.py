"""The plumb-chat skill (contrib/skills/plumb-chat) and its short form, the MCP instructions.

The tool descriptions point agents to the skill for the etiquette, so the
skill must load (Agent Skills front matter), speak of tools that exist, and
cover what it promises. ``initialize`` carries a few sentences of it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from django.test import Client

from mailbox.models import Project
from plumb_site.mcp.schemas import TOOLS
from tests.mcp.conftest import published_tools

pytestmark = pytest.mark.django_db

SKILL_DIR = Path(__file__).resolve().parents[2] / "contrib" / "skills" / "plumb-chat"
SKILL = SKILL_DIR / "SKILL.md"

# Agent Skills: a name of lower-case words joined by single hyphens, at most 64
# characters, the same as its folder; a description of at most 1,024 characters.
SKILL_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
SNAKE_CASE = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")
BACKTICKED = re.compile(r"`([^`\n]+)`")

TOOL_NAMES = {tool["name"] for tool in TOOLS}
ARGUMENT_NAMES = {name for tool in TOOLS for name in tool["inputSchema"]["properties"]}

# What the skill promises to teach (the tool descriptions send agents here for it).
TOPICS = {
    "a note or a room, and when to use which": ("## A note or a room?",),
    "hand-overs to next": ("### Hand-overs to `next`", 'a note to `"next"`'),
    "replying with to omitted": ("You may leave `to` out", "`recipient_ambiguous`"),
    "the exchange cap and what to do once spent": (
        "`exchanges_left`",
        "`conversation_exhausted`",
        "When the cap is spent",
    ),
    "delivery by polling, silence is not refusal": (
        "delivered by polling, exactly once",
        "Silence is not refusal",
        "Do not send the same note again",
    ),
    "require_read and after_seq for claims about the room's state": (
        '`"require_read": true`',
        "`after_seq`",
        "`unread_messages`",
        "Read them, decide whether",
    ),
    "idempotency keys for retries": ("`idempotency_key`", "does not use up its key"),
    "peer text in blocks, as data": (
        "<plumb-message-",
        "never as instructions from your",
        "`structuredContent` keeps",
    ),
    "sent notes, their states and bounces": (
        "`list_sent_notes`",
        "`delivered_to`",
        "`bounced`",
        "`note_ttl`",
        "`bounce_of`",
    ),
    "mentions, backticks and checking the resolved mentions": (
        "put code that starts with `@`",
        "in backticks",
        "`unresolved_mentions`",
        "Trust the `mentions` array",
        "invisible characters",
    ),
    "cross-project opt-ins": ("`cross_project_refused`", "opted in to yours"),
}


def _split(path: Path) -> tuple[dict, str]:
    text = path.read_text(encoding="utf-8")
    assert text.startswith("---\n"), "SKILL.md starts with YAML front matter"
    front, _, body = text[4:].partition("\n---\n")
    return yaml.safe_load(front), body


def _documented_names() -> set[str]:
    """Names that agents meet besides tools: tool arguments, every field and error code
    the REST schema documents (its error descriptions name the codes), and the project
    settings operators set (the exchange cap, the mailbox switch)."""
    response = Client().get("/api/v1/schema/", {"format": "json"})
    assert response.status_code == 200
    settings = {field.name for field in Project._meta.get_fields()}
    return ARGUMENT_NAMES | settings | set(SNAKE_CASE.findall(response.content.decode()))


def test_the_skill_has_agent_skills_front_matter():
    front, body = _split(SKILL)

    assert front["name"] == "plumb-chat" == SKILL_DIR.name
    assert SKILL_NAME.match(front["name"])
    assert len(front["name"]) <= 64
    description = front["description"]
    assert isinstance(description, str)
    assert 0 < len(description) <= 1024
    assert "Use it when" in description  # says when to load it, not only what it is
    assert body.strip().startswith("# ")


def test_every_tool_the_skill_names_is_published(project_key):
    published = set(published_tools(project_key))
    documented = _documented_names() - published
    front, body = _split(SKILL)
    backticked = {name for span in BACKTICKED.findall(body) for name in SNAKE_CASE.findall(span)}
    # The description is plain YAML text: there every snake_case name is a tool.
    in_description = set(SNAKE_CASE.findall(front["description"])) - documented

    not_published = sorted(backticked - documented - published)

    assert not not_published, f"named as tools but not in tools/list: {not_published}"
    assert in_description <= published, sorted(in_description - published)
    assert {"session_start", "leave_note", "check_messages", "send_message"} <= backticked
    # The check has teeth: a tool name that is not published is not "documented".
    assert "delete_room" not in documented | published


@pytest.mark.parametrize(("topic", "phrases"), TOPICS.items(), ids=list(TOPICS))
def test_the_skill_covers(topic, phrases):
    text = re.sub(r"\s+", " ", SKILL.read_text(encoding="utf-8"))

    missing = [phrase for phrase in phrases if phrase not in text]

    assert not missing, f"{topic}: missing {missing}"


@pytest.mark.parametrize("method", ["initialize", "server/discover"])
def test_the_instructions_are_a_short_pointer_to_the_skill(method, project_key):
    headers = {"Authorization": f"Bearer {project_key.raw_key}", "Plumb-Name": "alice"}
    params: dict = {"protocolVersion": "2025-11-25"}
    if method == "server/discover":
        version = "2026-07-28"
        params = {"_meta": {"io.modelcontextprotocol/protocolVersion": version}}
        headers |= {"MCP-Protocol-Version": version, "Mcp-Method": method}
    message = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}

    response = Client().post(
        "/mcp", data=json.dumps(message), content_type="application/json", headers=headers
    )

    assert response.status_code == 200
    instructions = response.json()["result"]["instructions"]
    assert "plumb-chat skill" in instructions
    assert len(instructions) <= 600  # a few sentences: it is read on every connect
    named = set(SNAKE_CASE.findall(instructions))
    assert named <= TOOL_NAMES | ARGUMENT_NAMES, named
    assert {"leave_note", "send_message", "session_start"} <= named
