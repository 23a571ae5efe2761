"""The published tool list: its size, its schemas against REST's, its fingerprint."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from rest_framework import serializers

from common import limits
from common.schema import reset_schema_fingerprint, schema_fingerprint
from mailbox.api import serializers as mailbox_io
from mailbox.models import Note
from plumb_site.mcp import schemas
from rooms.api import serializers as room_io
from rooms.models import Event
from tests.mcp.conftest import BINDING_TOOL_NAMES

pytestmark = pytest.mark.django_db

# SPEC §6: the whole tool list stays under 3,500 tokens (characters / 4).
TOKEN_BUDGET = 3500

# The REST input serializer whose fields each tool's arguments are.
REST_INPUTS = {
    "session_start": mailbox_io.SessionStartInput,
    "leave_note": mailbox_io.NoteLeaveInput,
    "check_messages": mailbox_io.NotesCheckInput,
    "list_conversations": mailbox_io.ConversationListInput,
    "create_room": room_io.RoomCreateInput,
    "join_room": room_io.RoomJoinInput,
    "send_message": room_io.MessageSendInput,
    "read_messages": room_io.EventsReadInput,
    "review_message": room_io.ReviewInput,
    "mark_read": room_io.ReadInput,
    "wait_for_activity": room_io.ActivityInput,
    "list_sent_notes": mailbox_io.NotesSentInput,
    "search": room_io.SearchInput,
}

# An empty body passes these REST serializers and is refused by the service, with
# the same validation_error the schema's minLength gives.
SERVICE_CHECKED_BLANKS = {("leave_note", "body"), ("send_message", "body")}


@pytest.fixture(autouse=True)
def _fresh_fingerprint():
    reset_schema_fingerprint()
    yield
    reset_schema_fingerprint()


def tools_list(project_key, stateless: bool) -> dict:
    headers = {"Authorization": f"Bearer {project_key.raw_key}"}
    params = {}
    if stateless:
        version = "2026-07-28"
        params["_meta"] = {"io.modelcontextprotocol/protocolVersion": version}
        headers |= {"MCP-Protocol-Version": version, "Mcp-Method": "tools/list"}
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params}
    response = Client().post(
        "/mcp", data=json.dumps(message), content_type="application/json", headers=headers
    )
    assert response.status_code == 200
    return response.json()["result"]


@pytest.mark.parametrize("stateless", [False, True], ids=["handshake", "stateless"])
def test_the_whole_tool_list_fits_in_3500_tokens(stateless, project_key):
    result = tools_list(project_key, stateless)
    characters = len(json.dumps(result))

    tokens = characters / 4  # the usual estimate for English and JSON
    print(
        f"tools/list ({'stateless' if stateless else 'handshake'}): {characters} chars ≈ "
        f"{tokens:.0f} tokens"
    )

    assert tokens < TOKEN_BUDGET


def test_the_tool_list_is_exactly_the_binding_names_in_a_stable_order(project_key):
    names = [tool["name"] for tool in tools_list(project_key, False)["tools"]]

    assert names == BINDING_TOOL_NAMES


@pytest.mark.parametrize("tool", schemas.TOOLS, ids=lambda tool: tool["name"])
def test_every_tool_takes_the_fingerprint_and_nothing_unpublished(tool):
    schema = tool["inputSchema"]

    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert schema["properties"]["tool_schema_fingerprint"]["type"] == "string"
    assert set(schema.get("required", ())) <= set(schema["properties"])
    assert 0 < len(tool["description"]) < 700


@pytest.mark.parametrize(("name", "serializer_class"), REST_INPUTS.items())
def test_argument_limits_are_the_rest_limits(name, serializer_class):
    properties = schemas.TOOLS_BY_NAME[name]["inputSchema"]["properties"]
    fields = serializer_class().fields
    for field_name, field in fields.items():
        assert field_name in properties, f"{name}: REST field {field_name} has no argument"
        schema = properties[field_name]
        if schema["type"] == "array":
            # kinds: a list of event kinds where REST takes them comma-separated.
            assert schema["items"]["enum"] == list(Event.Kind.values), (name, field_name)
        elif isinstance(field, serializers.RegexField):
            (rest_pattern,) = {v.regex.pattern for v in field.validators if hasattr(v, "regex")}
            assert schema["pattern"] == rest_pattern.replace("\\Z", "$"), (name, field_name)
        elif getattr(field, "max_length", None) is not None:
            assert schema.get("maxLength") == field.max_length, (name, field_name)
        if getattr(field, "min_value", None) is not None:
            assert schema.get("minimum") == field.min_value, (name, field_name)
        if getattr(field, "max_value", None) is not None:
            assert schema.get("maximum") == field.max_value, (name, field_name)
        elif "maximum" in schema and schema["type"] != "number":
            # The only bound REST lacks: seqs the database cannot hold (see limits.MAX_SEQ).
            assert schema["maximum"] == limits.MAX_SEQ, (name, field_name)
        if isinstance(field, serializers.CharField) and schema["type"] != "array":
            service_checked = (name, field_name) in SERVICE_CHECKED_BLANKS
            blank_refused = not field.allow_blank or service_checked
            assert blank_refused == (schema.get("minLength", 0) >= 1 or "pattern" in schema), (
                name,
                field_name,
            )
            assert field.allow_null == (schema["type"] == ["string", "null"]), (name, field_name)
        if isinstance(field, serializers.ChoiceField):
            assert schema["enum"] == list(field.choices), (name, field_name)
        required = field_name in schemas.TOOLS_BY_NAME[name]["inputSchema"].get("required", ())
        # session_start's fields may come from the connection's headers instead.
        assert required == (field.required and name != "session_start"), (name, field_name)


def test_enums_are_the_models_choices():
    assert list(Event.Kind.values) == schemas.EVENT_KINDS
    assert list(Event.Verdict.values) == schemas.VERDICTS
    assert list(Note.State.values) == schemas.NOTE_STATES


def test_the_fingerprint_covers_the_tool_list(monkeypatch, project_key):
    before = schema_fingerprint()
    assert tools_list(project_key, False)["_meta"]["dev.plumb/toolSchemaFingerprint"] == before

    monkeypatch.setitem(schemas.TOOLS_BY_NAME["mark_read"], "description", "Changed.")
    reset_schema_fingerprint()

    assert schema_fingerprint() != before
