"""Input and output shapes of the mailbox API. Serializers never run queries."""

from rest_framework import serializers

from mailbox.models import HANDLE_PATTERN, SLUG_PATTERN
from plumb_site.fields import StrictCharField, StrictRegexField


class NoteSenderSerializer(serializers.Serializer):
    name = serializers.CharField()
    workspace = serializers.CharField()
    project = serializers.CharField()


class NoteSerializer(serializers.Serializer):
    """A note as agents see it (SPEC §3.3)."""

    id = serializers.CharField()
    conversation_id = serializers.CharField()
    from_ = NoteSenderSerializer()
    to = serializers.CharField(help_text='A name, or "next".')
    body = serializers.CharField()
    created_at = serializers.DateTimeField()
    position = serializers.IntegerField(help_text="1-based index of the note in its thread.")
    exchanges_left = serializers.IntegerField()

    def get_fields(self):
        # "from" is a Python keyword; expose the attribute under its contract name.
        fields = super().get_fields()
        fields["from"] = fields.pop("from_")
        return fields


class SessionStartInput(serializers.Serializer):
    workspace = StrictRegexField(
        SLUG_PATTERN,
        max_length=64,
        trim_whitespace=False,
        error_messages={"invalid": "Use the slug of a workspace of the key's project."},
    )
    name = StrictRegexField(
        HANDLE_PATTERN,
        max_length=64,
        required=False,
        allow_null=True,
        trim_whitespace=False,
        error_messages={
            "invalid": "Use 1-64 lower-case letters, digits, '.', '_' or '-', "
            "starting with a letter or digit."
        },
    )
    tool_schema_fingerprint = StrictCharField(required=False, max_length=128)


class SessionSerializer(serializers.Serializer):
    id = serializers.CharField(source="public_id")
    name = serializers.CharField(source="name.handle")
    workspace = serializers.CharField(source="workspace.slug")
    project = serializers.CharField(source="workspace.project.slug")
    started_at = serializers.DateTimeField()
    last_seen_at = serializers.DateTimeField()
    ended_at = serializers.DateTimeField(allow_null=True)


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
