"""Input and output shapes of the rooms API. Output serializers never run queries:
selectors fetch every related row they read."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from common import limits
from common.fields import (
    QueryBooleanField,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    StrictRegexField,
    WaitField,
)
from common.text import visible
from common.validation import BodyInput, NoFieldsInput
from mailbox.api.serializers import EnvelopeSerializer, ScrubbedSerializer
from mailbox.models import AuthorKind
from rooms.models import Event, Message
from rooms.representation import RoomSerializer, event_json, message_json, review_json

# --- serializers -------------------------------------------------------------------


class PersonSerializer(serializers.Serializer):
    """A handle with its display name; ``display_name_visible`` shows invisible
    and bidi characters as ``<U+XXXX>`` so look-alike names can be told apart."""

    handle = serializers.CharField()
    display_name = serializers.CharField()
    display_name_visible = serializers.SerializerMethodField()

    def get_display_name_visible(self, person) -> str:
        return visible(person["display_name"] if isinstance(person, dict) else person.display_name)


class AuthorSerializer(PersonSerializer):
    """Who wrote a message or did an event, and what kind of writer: ``agent`` or
    ``human`` (a person posting from the admin)."""

    kind = serializers.ChoiceField(choices=AuthorKind.choices)


# Declares message_json's fields for the schema; the get_ methods give it their types.
# (Comments, not docstrings: a docstring would become the schema's description.)
class MessageSerializer(serializers.Serializer):
    id = serializers.CharField(source="public_id")
    seq = serializers.IntegerField()
    room = serializers.CharField(source="room.slug")
    author = serializers.SerializerMethodField()
    body = serializers.SerializerMethodField(help_text="Null when a moderator hid the message.")
    reply_to = serializers.SerializerMethodField()
    mentions = PersonSerializer(many=True)
    created_at = serializers.DateTimeField()
    hidden = serializers.BooleanField()

    def to_representation(self, instance: Message) -> dict:
        return message_json(instance)

    @extend_schema_field(AuthorSerializer)
    def get_author(self, message) -> dict:
        return message_json(message)["author"]

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_body(self, message) -> str | None:
        return message_json(message)["body"]

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_reply_to(self, message) -> str | None:
        return message_json(message)["reply_to"]


# Declares review_json's fields for the schema.
class ReviewSerializer(serializers.Serializer):
    message_id = serializers.CharField(source="message.public_id")
    verdict = serializers.ChoiceField(choices=Event.Verdict.choices)
    body = serializers.SerializerMethodField()

    def to_representation(self, instance: Event) -> dict:
        return review_json(instance)

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_body(self, event) -> str | None:
        return review_json(event)["body"]


# Schema only: moderation_json builds the output from the event's data.
class ModerationSerializer(serializers.Serializer):
    action = serializers.CharField()
    reason = serializers.CharField(allow_blank=True)
    message_id = serializers.CharField(allow_null=True)
    member = serializers.CharField(allow_null=True, required=False)


class EventSerializer(serializers.Serializer):
    """One event of a room's stream; exactly one of message, review and
    moderation is set for those kinds, none for join and leave."""

    # Declares event_json's fields for the schema; the get_ methods give it their types.
    seq = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=Event.Kind.choices)
    created_at = serializers.DateTimeField()
    actor = serializers.SerializerMethodField()
    message = serializers.SerializerMethodField()
    review = serializers.SerializerMethodField()
    moderation = serializers.SerializerMethodField()

    def to_representation(self, instance: Event) -> dict:
        return event_json(instance)

    @extend_schema_field(AuthorSerializer(allow_null=True))
    def get_actor(self, event) -> dict | None:
        return event_json(event)["actor"]

    @extend_schema_field(MessageSerializer(allow_null=True))
    def get_message(self, event) -> dict | None:
        return event_json(event)["message"]

    @extend_schema_field(ReviewSerializer(allow_null=True))
    def get_review(self, event) -> dict | None:
        return event_json(event)["review"]

    @extend_schema_field(ModerationSerializer(allow_null=True))
    def get_moderation(self, event) -> dict | None:
        return event_json(event)["moderation"]


class MemberSerializer(serializers.Serializer):
    handle = serializers.CharField(source="name.handle")
    display_name = serializers.CharField()
    display_name_visible = serializers.SerializerMethodField()
    joined_at = serializers.DateTimeField()
    muted = serializers.BooleanField()
    read_seq = serializers.IntegerField()

    def get_display_name_visible(self, member) -> str:
        return visible(member.display_name)


# --- inputs ----------------------------------------------------------------------


class RoomCreateInput(BodyInput):
    slug = StrictRegexField(limits.SLUG_PATTERN, max_length=limits.NAME_MAX)
    title = StrictCharField(
        required=False, allow_blank=True, max_length=limits.ROOM_TITLE_MAX, default=""
    )
    topic = StrictCharField(
        required=False, allow_blank=True, max_length=limits.ROOM_TOPIC_MAX, default=""
    )
    display_name = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=limits.DISPLAY_NAME_MAX,
        default="",
    )


# Only the fingerprint; a class of its own so that the schema names the body.
class RoomLeaveInput(NoFieldsInput):
    pass


class RoomJoinInput(BodyInput):
    display_name = StrictCharField(
        required=False,
        allow_null=True,
        allow_blank=True,
        max_length=limits.DISPLAY_NAME_MAX,
    )


class MessageSendInput(BodyInput):
    body = StrictCharField(allow_blank=True)
    reply_to = StrictCharField(required=False, allow_null=True, max_length=limits.PUBLIC_ID_MAX)
    idempotency_key = StrictCharField(
        required=False,
        allow_null=True,
        max_length=limits.IDEMPOTENCY_KEY_MAX,
    )
    after_seq = StrictIntegerField(required=False, allow_null=True, min_value=0)
    require_read = StrictBooleanField(required=False, default=False)


class ReviewInput(BodyInput):
    verdict = serializers.ChoiceField(choices=Event.Verdict.choices)
    body = StrictCharField(required=False, allow_null=True, allow_blank=True)


class ReadInput(BodyInput):
    seq = StrictIntegerField(min_value=0)


class EventsReadInput(serializers.Serializer):
    after_seq = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=limits.MAX_SEQ,
        help_text="Default: your read position.",
    )
    limit = serializers.IntegerField(
        required=False, min_value=1, max_value=limits.READ_MAX, default=limits.PAGE_DEFAULT
    )
    kinds = serializers.CharField(
        required=False, max_length=limits.KINDS_PARAM_MAX, help_text="Comma-separated event kinds."
    )
    mark_read = QueryBooleanField(required=False, default=True)
    wait = WaitField(help_text="Seconds to wait for an event above the reference when none is.")

    def validate_kinds(self, value: str) -> list[str]:
        kinds = [k.strip() for k in value.split(",") if k.strip()]
        unknown = sorted(set(kinds) - set(Event.Kind.values))
        if unknown or not kinds:
            raise serializers.ValidationError(
                f"Use a comma-separated list of: {', '.join(Event.Kind.values)}."
            )
        return kinds


class RoomListInput(serializers.Serializer):
    after_slug = serializers.CharField(
        required=False, max_length=limits.NAME_MAX, help_text="Continue after this room."
    )
    limit = serializers.IntegerField(
        required=False, min_value=1, max_value=limits.LIST_MAX, default=limits.PAGE_DEFAULT
    )


class ActivityInput(serializers.Serializer):
    wait = WaitField(help_text="Seconds to wait for a note or news in a room.")


class SearchInput(serializers.Serializer):
    """``GET /api/v1/search/``'s parameters; the MCP tool ``search`` takes the same."""

    q = StrictCharField(
        allow_blank=True,
        help_text='Words (all must match), "a phrase", -word to leave out, prefix* (3+ '
        "characters); case and accents do not matter. A malformed query is invalid_query.",
    )
    room = StrictRegexField(
        limits.SLUG_PATTERN,
        max_length=limits.NAME_MAX,
        required=False,
        help_text="Only messages of this room (no notes).",
    )
    # "from" is a Python keyword: declared as from_, published as from (get_fields).
    from_ = StrictRegexField(
        limits.HANDLE_PATTERN,
        max_length=limits.NAME_MAX,
        required=False,
        help_text="Only what this name wrote.",
    )
    after = serializers.DateTimeField(required=False, help_text="Only what was written after.")
    before = serializers.DateTimeField(required=False, help_text="Only what was written before.")
    limit = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=limits.SEARCH_PAGE_MAX,
        default=limits.SEARCH_PAGE_DEFAULT,
    )
    cursor = StrictCharField(
        required=False,
        max_length=limits.SEARCH_CURSOR_MAX,
        help_text="The previous page's cursor, with the same q and filters.",
    )

    def get_fields(self):
        fields = super().get_fields()
        return {("from" if name == "from_" else name): f for name, f in fields.items()}


class MentionsInput(serializers.Serializer):
    after_id = serializers.CharField(
        required=False, max_length=limits.PUBLIC_ID_MAX, help_text="Continue after this message id."
    )
    limit = serializers.IntegerField(
        required=False, min_value=1, max_value=limits.LIST_MAX, default=limits.PAGE_DEFAULT
    )


# --- outputs ---------------------------------------------------------------------


class MentionWarningSerializer(serializers.Serializer):
    typed = serializers.CharField()
    handle = serializers.CharField()
    reason = serializers.ChoiceField(choices=["invisible_characters", "confusable"])


class MessageSendOutput(EnvelopeSerializer):
    message = MessageSerializer()
    latest_seq = serializers.IntegerField(help_text="The room's head after this call.")
    unseen_before_send = serializers.IntegerField(
        help_text="Messages from others above your reference point when you posted."
    )
    mentions = PersonSerializer(many=True)
    unresolved_mentions = serializers.ListField(child=serializers.CharField())
    mention_warnings = MentionWarningSerializer(many=True)
    scrubbed = ScrubbedSerializer(many=True)
    replayed = serializers.BooleanField()


class EventsReadOutput(EnvelopeSerializer):
    events = EventSerializer(many=True)
    latest_seq = serializers.IntegerField()
    read_seq = serializers.IntegerField()
    has_more = serializers.BooleanField()
    history_starts_at = serializers.IntegerField(
        required=False,
        help_text="Only when the read started below the room's first kept event: that "
        "event's seq. Older events were purged (the project's retention_days); seqs are "
        "never reused.",
    )


class ActivityRoomSerializer(serializers.Serializer):
    slug = serializers.CharField()
    latest_seq = serializers.IntegerField()
    read_seq = serializers.IntegerField(help_text="Your read position.")
    unseen = serializers.IntegerField(
        help_text="Messages from others above your read position, as in list_rooms."
    )


class ActivityOutput(EnvelopeSerializer):
    rooms = ActivityRoomSerializer(
        many=True,
        help_text="Rooms you joined where a message or review by someone else sits above your "
        "read position; listed, not read.",
    )


class RoomOutput(EnvelopeSerializer):
    room = RoomSerializer()


class RoomEventOutput(EnvelopeSerializer):
    room = RoomSerializer()
    event = EventSerializer(allow_null=True)
    latest_seq = serializers.IntegerField()


class RoomEnteredOutput(RoomEventOutput):
    scrubbed = ScrubbedSerializer(
        many=True, help_text="What was redacted from the title, topic and display name."
    )


class RoomListOutput(EnvelopeSerializer):
    rooms = RoomSerializer(many=True)
    has_more = serializers.BooleanField()


class MemberListOutput(EnvelopeSerializer):
    members = MemberSerializer(many=True)


class ReviewOutput(EnvelopeSerializer):
    event = EventSerializer()
    latest_seq = serializers.IntegerField()


class ReadOutput(EnvelopeSerializer):
    read_seq = serializers.IntegerField()
    latest_seq = serializers.IntegerField()


class MessageReceiptsOutput(EnvelopeSerializer):
    message = MessageSerializer()
    read_by = serializers.ListField(
        child=serializers.CharField(),
        help_text="Current members other than the author whose read position reached it.",
    )
    unread_by = serializers.ListField(
        child=serializers.CharField(),
        help_text="Current members other than the author who have not read that far.",
    )


class MentionListOutput(EnvelopeSerializer):
    mentions = MessageSerializer(many=True)
    has_more = serializers.BooleanField()


class SearchSenderSerializer(serializers.Serializer):
    name = serializers.CharField()
    workspace = serializers.CharField(allow_null=True, help_text="Null for a person or plumb.")
    project = serializers.CharField(allow_null=True, help_text="Null for a person or plumb.")
    kind = serializers.ChoiceField(choices=["agent", "human", "system"])


class SearchResultSerializer(serializers.Serializer):
    """A message (with room and seq) or a note (with conversation_id) that matched."""

    kind = serializers.ChoiceField(choices=["message", "note"])
    id = serializers.CharField()
    room = serializers.CharField(required=False, help_text="Messages: the room's slug.")
    seq = serializers.IntegerField(required=False, help_text="Messages: the seq in the room.")
    conversation_id = serializers.CharField(required=False, help_text="Notes: the thread.")
    from_ = SearchSenderSerializer()
    created_at = serializers.DateTimeField()
    snippet = serializers.CharField(
        help_text="The matched words in context, each match as **match**; other asterisks and "
        "backslashes escaped with a backslash; one line."
    )

    def get_fields(self):
        fields = super().get_fields()
        return {("from" if name == "from_" else name): f for name, f in fields.items()}


class SearchOutput(EnvelopeSerializer):
    results = SearchResultSerializer(many=True, help_text="Best matches first.")
    has_more = serializers.BooleanField()
    cursor = serializers.CharField(
        allow_null=True, help_text="Pass it back for the next page; null on the last one."
    )
