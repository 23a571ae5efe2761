"""How the mailbox's objects look to agents: the JSON of notes, sessions and threads.

REST views, MCP tools, the response envelope and errors all build their JSON
here, so a note reads the same whichever door it leaves by. The API's
serializer module re-uses these classes for the OpenAPI schema. Serializers
never run queries: selectors fetch every related row they read.
"""

from datetime import UTC, datetime
from typing import Any

from rest_framework import serializers
from rest_framework.settings import api_settings


def timestamp(value: datetime) -> str:
    """DRF's DateTimeField output here (TIME_ZONE is UTC), minus its time-zone lookup."""
    return value.astimezone(UTC).strftime(api_settings.DATETIME_FORMAT)


class NoteSenderSerializer(serializers.Serializer):
    name = serializers.CharField(source="handle")
    workspace = serializers.CharField(source="workspace.slug")
    project = serializers.CharField(source="workspace.project.slug")


class NoteSerializer(serializers.Serializer):
    """A note as agents see it (SPEC §3.3): declares ``note_json``'s fields for
    the schema and returns its dict (tests/mailbox/test_representation.py
    holds the two to the same keys and values)."""

    id = serializers.CharField(source="public_id")
    conversation_id = serializers.CharField(source="conversation.public_id")
    from_ = NoteSenderSerializer(source="sender_name")
    to = serializers.CharField(source="to_display", help_text='A name, or "next".')
    body = serializers.CharField()
    created_at = serializers.DateTimeField()
    position = serializers.IntegerField(help_text="1-based index of the note in its thread.")
    exchanges_left = serializers.IntegerField(source="conversation.exchanges_left")
    delivered_at = serializers.DateTimeField(
        allow_null=True, help_text="When the note was delivered; null while it waits."
    )

    def get_fields(self):
        # "from" is a Python keyword; expose the attribute under its contract name.
        fields = super().get_fields()
        return {("from" if name == "from_" else name): f for name, f in fields.items()}

    def to_representation(self, instance) -> dict[str, Any]:
        return note_json(instance)


class SessionSerializer(serializers.Serializer):
    id = serializers.CharField(source="public_id")
    name = serializers.CharField(source="name.handle")
    workspace = serializers.CharField(source="workspace.slug")
    project = serializers.CharField(source="workspace.project.slug")
    started_at = serializers.DateTimeField()
    last_seen_at = serializers.DateTimeField()
    ended_at = serializers.DateTimeField(allow_null=True)


class ParticipantSerializer(serializers.Serializer):
    name = serializers.CharField(source="name.handle")
    workspace = serializers.CharField(source="name.workspace.slug")
    project = serializers.CharField(source="name.workspace.project.slug")


class ConversationSerializer(serializers.Serializer):
    id = serializers.CharField(source="public_id")
    participants = ParticipantSerializer(many=True)
    cap = serializers.IntegerField()
    exchanges_left = serializers.IntegerField()
    notes_count = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    last_note_at = serializers.DateTimeField()
    locked = serializers.SerializerMethodField()

    def get_locked(self, conversation) -> bool:
        return conversation.locked_at is not None


class ConversationDetailSerializer(ConversationSerializer):
    notes = NoteSerializer(many=True, help_text="Every note of the thread, by position.")


def session_json(session) -> dict[str, Any]:
    return SessionSerializer(session).data


def note_json(note) -> dict[str, Any]:
    """A note as a plain dict: DRF's per-field machinery cost a fifth of a
    note call. Expects sender, conversation and addressee to be loaded."""
    sender = note.sender_name
    workspace = sender.workspace
    conversation = note.conversation
    delivered_at = note.delivered_at
    return {
        "id": note.public_id,
        "conversation_id": conversation.public_id,
        "from": {
            "name": sender.handle,
            "workspace": workspace.slug,
            "project": workspace.project.slug,
        },
        "to": note.to_display,
        "body": note.body,
        "created_at": timestamp(note.created_at),
        "position": note.position,
        "exchanges_left": conversation.exchanges_left,
        "delivered_at": timestamp(delivered_at) if delivered_at is not None else None,
    }


def notes_json(notes) -> list[dict[str, Any]]:
    return [note_json(note) for note in notes]


# --- response bodies, shared by the REST views and the MCP tools ------------------


def note_left_body(left) -> dict:
    return {
        "note": note_json(left.note),
        "conversation_id": left.note.conversation.public_id,
        "delivery": left.delivery,
        "exchanges_left": left.exchanges_left,
        "scrubbed": left.scrubbed,
        "replayed": left.replayed,
    }


def conversation_list_body(threads, has_more: bool) -> dict:
    return {"conversations": ConversationSerializer(threads, many=True).data, "has_more": has_more}


def conversation_detail_body(conversation) -> dict:
    return {"conversation": ConversationDetailSerializer(conversation).data}
