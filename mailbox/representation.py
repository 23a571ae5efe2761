"""How the mailbox's objects look to agents: the JSON of notes, sessions and threads.

REST views, MCP tools, the response envelope and errors all build their JSON
here, so a note reads the same whichever door it leaves by. The API's
serializer module re-uses these classes for the OpenAPI schema. Serializers
never run queries: selectors fetch every related row they read.
"""

from datetime import UTC, datetime
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.settings import api_settings

from common.limits import SYSTEM_NAME, TIMESTAMP_FORMAT
from mailbox.models import AuthorKind, Note


def timestamp(value: datetime) -> str:
    """DRF's DateTimeField output here (TIME_ZONE is UTC), minus its time-zone lookup.

    A UTC value in plumb's format is ``isoformat``'s text with ``Z`` for its
    offset, in half of ``strftime``'s time: a page of 50 events writes 100.
    ``isoformat`` pads a year before 1000 where ``strftime`` does not.
    """
    wanted = api_settings.DATETIME_FORMAT
    if wanted == TIMESTAMP_FORMAT and value.tzinfo is UTC and value.year >= 1000:
        return value.isoformat(timespec="microseconds")[:-6] + "Z"
    return value.astimezone(UTC).strftime(wanted)


class NoteSenderSerializer(serializers.Serializer):
    """Who wrote a note. plumb's own notes come from ``plumb``, kind ``system``,
    and people's notes from their handle, kind ``human``: neither has a
    workspace or project."""

    name = serializers.CharField()
    workspace = serializers.CharField(allow_null=True)
    project = serializers.CharField(allow_null=True)
    kind = serializers.ChoiceField(choices=AuthorKind.choices)


class NoteRecipientSerializer(serializers.Serializer):
    name = serializers.CharField()
    kind = serializers.ChoiceField(choices=AuthorKind.choices)


@extend_schema_field(NoteSenderSerializer)
class _SenderField(serializers.Field):
    """The whole note in, its ``from`` out: a system note has no sender row to follow."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(source="*", read_only=True, **kwargs)

    def to_representation(self, note: Note) -> dict[str, Any]:
        return sender_json(note)


@extend_schema_field(NoteRecipientSerializer(allow_null=True))
class _DeliveredToField(serializers.Field):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(source="*", read_only=True, **kwargs)

    def to_representation(self, note: Note) -> dict[str, Any] | None:
        return delivered_to_json(note)


class NoteSerializer(serializers.Serializer):
    """A note as agents see it (SPEC §3.3): declares ``note_json``'s fields for
    the schema and returns its dict (tests/mailbox/test_representation.py
    holds the two to the same keys and values)."""

    id = serializers.CharField(source="public_id")
    conversation_id = serializers.CharField(source="conversation.public_id")
    from_ = _SenderField()
    to = serializers.CharField(source="to_display", help_text='A name, or "next".')
    body = serializers.CharField()
    created_at = serializers.DateTimeField()
    position = serializers.IntegerField(help_text="1-based index of the note in its thread.")
    exchanges_left = serializers.IntegerField(source="conversation.exchanges_left")
    state = serializers.ChoiceField(
        choices=Note.State.choices,
        help_text="waiting: not picked up yet; delivered: a session received it "
        "(delivered_to, delivered_at); bounced: nobody picked it up within the sender "
        "project's note_ttl, and it will never be delivered.",
    )
    delivered_at = serializers.SerializerMethodField(
        help_text="When the note was delivered; null while it waits, and for a bounced note."
    )
    delivered_to = _DeliveredToField(help_text="Who received it; null until then.")
    bounce_of = serializers.CharField(
        source="bounce_of_id",
        allow_null=True,
        help_text="On plumb's notice that a note bounced: that note's id; null otherwise.",
    )

    @extend_schema_field(serializers.DateTimeField(allow_null=True))
    def get_delivered_at(self, note: Note) -> str | None:
        return _delivered_at(note)

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
    workspace = serializers.SerializerMethodField(help_text="null for a person.")
    project = serializers.SerializerMethodField(help_text="null for a person.")
    kind = serializers.ChoiceField(
        source="name.kind",
        choices=AuthorKind.choices,
        help_text="agent, or human: a person taking part from the admin.",
    )

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_workspace(self, participant) -> str | None:
        name = participant.name
        return None if name.kind == AuthorKind.HUMAN else name.workspace.slug

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_project(self, participant) -> str | None:
        name = participant.name
        return None if name.kind == AuthorKind.HUMAN else name.workspace.project.slug


class ConversationSerializer(serializers.Serializer):
    id = serializers.CharField(source="public_id")
    participants = ParticipantSerializer(many=True)
    cap = serializers.IntegerField()
    exchanges_left = serializers.IntegerField()
    notes_count = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    last_note_at = serializers.DateTimeField()
    locked = serializers.SerializerMethodField()
    awaiting_reply_from = serializers.ListField(
        child=serializers.CharField(),
        help_text="Who the thread waits to hear from: the recipient of its last note by an "
        'agent ("next" while a note to next waits); empty once it bounced.',
    )

    def get_locked(self, conversation) -> bool:
        return conversation.locked_at is not None


class ConversationDetailSerializer(ConversationSerializer):
    notes = NoteSerializer(many=True, help_text="Every note of the thread, by position.")


def session_json(session) -> dict[str, Any]:
    """A session as a plain dict, the fields of ``SessionSerializer``: DRF's
    per-field machinery cost a fifth of ``GET /sessions/current/``. Expects the
    name and the workspace's project to be loaded (authentication loads them)."""
    ended_at = session.ended_at
    return {
        "id": session.public_id,
        "name": session.name.handle,
        "workspace": session.workspace.slug,
        "project": session.workspace.project.slug,
        "started_at": timestamp(session.started_at),
        "last_seen_at": timestamp(session.last_seen_at),
        "ended_at": None if ended_at is None else timestamp(ended_at),
    }


def note_json(note) -> dict[str, Any]:
    """A note as a plain dict: DRF's per-field machinery cost a fifth of a
    note call. Expects sender, conversation and addressee to be loaded, and
    the receiving session's name once delivered."""
    conversation = note.conversation
    return {
        "id": note.public_id,
        "conversation_id": conversation.public_id,
        "from": sender_json(note),
        "to": note.to_display,
        "body": note.body,
        "created_at": timestamp(note.created_at),
        "position": note.position,
        "exchanges_left": conversation.exchanges_left,
        "state": note.state,
        "delivered_at": _delivered_at(note),
        "delivered_to": delivered_to_json(note),
        "bounce_of": note.bounce_of_id,
    }


def sender_json(note) -> dict[str, Any]:
    """A note's ``from``: its sender's name, workspace, project and kind."""
    sender = note.sender_name
    if sender is None:
        return {"name": SYSTEM_NAME, "workspace": None, "project": None, "kind": note.sender_kind}
    if note.sender_kind == AuthorKind.HUMAN:
        # A person belongs to no project: people are staff of the whole server.
        return {
            "name": sender.handle,
            "workspace": None,
            "project": None,
            "kind": AuthorKind.HUMAN.value,
        }
    workspace = sender.workspace
    return {
        "name": sender.handle,
        "workspace": workspace.slug,
        "project": workspace.project.slug,
        "kind": note.sender_kind,
    }


def delivered_to_json(note) -> dict[str, Any] | None:
    """Whom a delivered note went to; null while it waits, once bounced, or when the
    receiving session is gone."""
    if note.delivered_to_id is None:
        return None
    name = note.delivered_to.name
    return {"name": name.handle, "kind": name.kind}


def _delivered_at(note) -> str | None:
    # delivered_at also marks when a bounced note stopped waiting; agents see null.
    if note.delivered_at is None or note.bounced_at is not None:
        return None
    return timestamp(note.delivered_at)


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


def notes_sent_body(notes, has_more: bool) -> dict:
    return {"sent": notes_json(notes), "has_more": has_more}


def conversation_list_body(threads, has_more: bool) -> dict:
    return {"conversations": ConversationSerializer(threads, many=True).data, "has_more": has_more}


def conversation_detail_body(conversation) -> dict:
    return {"conversation": ConversationDetailSerializer(conversation).data}
