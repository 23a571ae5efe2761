"""Input and output shapes of the mailbox API. Serializers never run queries."""

from rest_framework import serializers

from common import limits
from common.fields import StrictCharField, StrictRegexField, WaitField
from common.validation import BodyInput
from mailbox.models import Note
from mailbox.representation import (
    ConversationDetailSerializer,
    ConversationSerializer,
    NoteSerializer,
    SessionSerializer,
)


class SessionStartInput(BodyInput):
    workspace = StrictRegexField(
        limits.SLUG_PATTERN,
        max_length=limits.NAME_MAX,
        error_messages={"invalid": "Use the slug of a workspace of the key's project."},
    )
    name = StrictRegexField(
        limits.HANDLE_PATTERN,
        max_length=limits.NAME_MAX,
        required=False,
        allow_null=True,
        error_messages={"invalid": limits.HANDLE_MESSAGE},
    )


class SchemaStaleSerializer(serializers.Serializer):
    current = serializers.CharField(help_text="The server's current schema fingerprint.")


class EnvelopeSerializer(serializers.Serializer):
    """Fields every successful session response carries (SPEC §2)."""

    notes = NoteSerializer(many=True, help_text="Notes delivered by this call, oldest first.")
    schema_stale = SchemaStaleSerializer(
        required=False, help_text="Present when the client's tool_schema_fingerprint is stale."
    )


class SessionStartOutput(EnvelopeSerializer):
    session = SessionSerializer()
    token = serializers.CharField(help_text="The session token; shown once, never stored.")


class SessionCurrentOutput(EnvelopeSerializer):
    session = SessionSerializer()


class NoteLeaveInput(BodyInput):
    # Size, emptiness and NUL are checked by the service (413 vs 400).
    body = StrictCharField(allow_blank=True)
    # Not nullable: null is not an omitted field, and an omitted one means "next".
    to = StrictCharField(required=False, max_length=limits.NAME_MAX, help_text='A name, or "next".')
    conversation_id = StrictCharField(
        required=False, allow_null=True, max_length=limits.PUBLIC_ID_MAX
    )
    idempotency_key = StrictCharField(
        required=False,
        allow_null=True,
        max_length=limits.IDEMPOTENCY_KEY_MAX,
    )


class ScrubbedSerializer(serializers.Serializer):
    kind = serializers.CharField()
    count = serializers.IntegerField()


class NoteLeaveOutput(EnvelopeSerializer):
    note = NoteSerializer()
    conversation_id = serializers.CharField()
    delivery = serializers.ChoiceField(choices=["session", "name", "next"])
    exchanges_left = serializers.IntegerField()
    scrubbed = ScrubbedSerializer(many=True, help_text="What was redacted from the body.")
    replayed = serializers.BooleanField(help_text="True when an idempotent retry was answered.")


class NotesCheckInput(serializers.Serializer):
    wait = WaitField(help_text="Seconds to wait for a note.")


class ConversationListInput(serializers.Serializer):
    """A page of a list: the one paging rule of both lists of notes' threads and sent notes."""

    after_id = StrictCharField(
        required=False,
        max_length=limits.PUBLIC_ID_MAX,
        help_text="Continue after this conversation.",
    )
    limit = serializers.IntegerField(
        min_value=1,
        max_value=limits.LIST_MAX,
        required=False,
        default=limits.PAGE_DEFAULT,
        help_text="At most this many.",
    )


class NotesSentInput(ConversationListInput):
    state = serializers.ChoiceField(
        choices=Note.State.choices,
        required=False,
        help_text="Only notes in this state: waiting, delivered or bounced.",
    )
    after_id = StrictCharField(
        required=False,
        max_length=limits.PUBLIC_ID_MAX,
        help_text="Continue after this note (the last id of the previous page).",
    )
    wait = WaitField(
        help_text="Seconds to wait until one of your waiting notes is delivered or bounced."
    )


class NotesSentOutput(EnvelopeSerializer):
    sent = NoteSerializer(many=True, help_text="Notes you sent, newest first.")
    has_more = serializers.BooleanField()


class ConversationListOutput(EnvelopeSerializer):
    conversations = ConversationSerializer(many=True)
    has_more = serializers.BooleanField()


class ConversationDetailOutput(EnvelopeSerializer):
    conversation = ConversationDetailSerializer()
