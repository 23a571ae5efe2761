"""Rooms: shared, ordered streams of events with gap-free sequence numbers.

Every event of a room (a message, a join, a leave, a review, a moderation)
takes the room's next ``seq``. The head counter lives on the room row and
advances in the same transaction that inserts the event, under the row's
lock, so seqs are unique, strictly increasing and gap-free per room; a
database constraint backs the uniqueness.
"""

from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from common import limits
from common.ids import new_public_id
from common.search.index import SearchIndex
from mailbox.models import AgentName, Project

room_slug_validator = RegexValidator(limits.SLUG_PATTERN, limits.SLUG_MESSAGE)


def message_public_id() -> str:
    return new_public_id("msg")


class Room(models.Model):
    slug = models.CharField(
        max_length=limits.NAME_MAX, unique=True, validators=[room_slug_validator]
    )
    # History is never one ORM call from deletion: a project with rooms, a
    # message with events and a name with messages cannot be deleted (a cascade
    # would take others' history with it, or leave a gap in a room's seqs).
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="rooms")
    title = models.CharField(max_length=limits.ROOM_TITLE_MAX, blank=True)
    topic = models.TextField(blank=True)
    head_seq = models.BigIntegerField(default=0, editable=False)
    # The first seq still stored: the purge deleted every event below it
    # (SPEC §8); reads from below it say so. Seqs are never reused.
    history_starts_at = models.BigIntegerField(default=1, editable=False)
    locked_at = models.DateTimeField(null=True, blank=True)
    # Paused by its flood limit until then (423 room_paused); past it the
    # room is open again with no write needed.
    paused_until = models.DateTimeField(null=True, blank=True, editable=False)
    # Agents' messages in the current flood window, which opened at
    # flood_window (Unix seconds), counted by the send's own UPDATE of the row.
    flood_window = models.BigIntegerField(default=0, editable=False)
    flood_count = models.PositiveIntegerField(default=0, editable=False)
    created_by = models.ForeignKey(
        AgentName, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug

    @property
    def locked(self) -> bool:
        return self.locked_at is not None


class Member(models.Model):
    """A name's membership of a room; it survives reconnects and leaving."""

    # No index of its own: member_unique (room, name) serves lookups by room.
    room = models.ForeignKey(Room, on_delete=models.CASCADE, related_name="members", db_index=False)
    name = models.ForeignKey(AgentName, on_delete=models.CASCADE, related_name="memberships")
    display_name = models.CharField(max_length=limits.DISPLAY_NAME_MAX, blank=True)
    read_seq = models.BigIntegerField(default=0)
    joined_at = models.DateTimeField(default=timezone.now)
    left_at = models.DateTimeField(null=True, blank=True)
    muted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["joined_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["room", "name"], name="member_unique"),
        ]
        indexes = [
            models.Index(
                fields=["name", "room"], condition=Q(left_at__isnull=True), name="member_current"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} in {self.room}"

    @property
    def is_current(self) -> bool:
        return self.left_at is None

    @property
    def muted(self) -> bool:
        return self.muted_at is not None


class Event(models.Model):
    class Kind(models.TextChoices):
        MESSAGE = "message"
        JOIN = "join"
        LEAVE = "leave"
        REVIEW = "review"
        MODERATION = "moderation"

    class Verdict(models.TextChoices):
        APPROVE = "approve"
        REQUEST_CHANGES = "request_changes"
        COMMENT = "comment"

    # Indexed by event_unique_seq and event_unseen, both (room, seq, ...).
    room = models.ForeignKey(Room, on_delete=models.CASCADE, related_name="events", db_index=False)
    seq = models.BigIntegerField()
    kind = models.CharField(max_length=16, choices=Kind.choices)
    # The agent behind the event; null for an operator's moderation.
    actor = models.ForeignKey(
        AgentName, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # Display name as it was when the event happened, so that reading history
    # needs no join and shows what others saw at the time.
    actor_display_name = models.CharField(max_length=limits.DISPLAY_NAME_MAX, blank=True)
    # message: the message posted; review: the message reviewed;
    # moderation: the message acted on, if any.
    # RESTRICT, not PROTECT: a message is never deleted alone (its event would
    # leave a gap), but a whole room still can be, events and messages together.
    message = models.ForeignKey(
        "Message", on_delete=models.RESTRICT, null=True, blank=True, related_name="+"
    )
    verdict = models.CharField(max_length=16, choices=Verdict.choices, blank=True)
    body = models.TextField(blank=True, help_text="Review text (secret-scrubbed).")
    # Moderation details: {"action", "reason", "member"?}; never the operator,
    # whom only the audit trail names.
    data = models.JSONField(default=dict, blank=True)
    # A review's, when its caller gave one (the admin's review forms do, so a
    # form sent twice reviews once). NULL, not "": the unique constraint
    # applies to keyed reviews only.
    idempotency_key = models.CharField(  # noqa: DJ001
        max_length=limits.IDEMPOTENCY_KEY_MAX, null=True, blank=True, editable=False
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["room_id", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["room", "seq"], name="event_unique_seq"),
            models.CheckConstraint(condition=Q(seq__gte=1), name="event_seq_positive"),
            models.UniqueConstraint(
                fields=["room", "actor", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="event_unique_idempotency_key",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.room_id}#{self.seq} {self.kind}"


class Message(models.Model):
    public_id = models.CharField(
        max_length=32, unique=True, default=message_public_id, editable=False
    )
    # Indexed by message_unique_seq (room, seq).
    room = models.ForeignKey(
        Room, on_delete=models.CASCADE, related_name="messages", db_index=False
    )
    seq = models.BigIntegerField()
    # Indexed by message_by_author (author, room, seq).
    author = models.ForeignKey(
        AgentName, on_delete=models.PROTECT, related_name="messages", db_index=False
    )
    author_display_name = models.CharField(max_length=limits.DISPLAY_NAME_MAX, blank=True)
    body = models.TextField(help_text="Markdown, secret-scrubbed before it was stored.")
    # This message's place among the room's messages and among its author's
    # messages in the room, from 1. "Messages from others after seq N" is then
    # a difference of four index look-ups (rooms.selectors.unseen_after)
    # instead of a count that grows with what the reader has not read.
    ordinal = models.BigIntegerField(default=0, editable=False)
    author_ordinal = models.BigIntegerField(default=0, editable=False)
    # Indexed only where set (message_replies): most messages reply to none,
    # and a send should not pay for an index entry nobody looks up.
    reply_to = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="replies",
        db_index=False,
    )
    # NULL, not "", for "no key": the unique constraint applies to keyed sends only.
    idempotency_key = models.CharField(  # noqa: DJ001
        max_length=limits.IDEMPOTENCY_KEY_MAX, null=True, blank=True
    )
    # Resolved at send time against the members of that moment.
    mentions = models.JSONField(default=list, blank=True)
    # What the send reported (unseen count, unresolved mentions, warnings), so
    # that an idempotent retry gets the same answer as the original.
    send_report = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    hidden_at = models.DateTimeField(null=True, blank=True)
    hidden_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["room_id", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["room", "seq"], name="message_unique_seq"),
            models.UniqueConstraint(
                fields=["room", "author", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="message_unique_idempotency_key",
            ),
        ]
        indexes = [
            models.Index(fields=["author", "room", "seq"], name="message_by_author"),
            models.Index(
                fields=["reply_to"], condition=Q(reply_to__isnull=False), name="message_replies"
            ),
        ]

    def __str__(self) -> str:
        return self.public_id

    @property
    def hidden(self) -> bool:
        return self.hidden_at is not None


# The messages' full-text index: a table beside rooms_message, outside the ORM
# (FTS5 on SQLite, a tsvector with GIN on PostgreSQL; common/search/index.py).
# message_send writes each message's row in its own transaction; a deleted
# message's row goes with it (a trigger). Hidden messages keep theirs, so the
# admin finds them; the agents' search leaves them out (rooms.selectors.search).
MESSAGE_INDEX = SearchIndex(table="rooms_message_search", source="rooms_message", key="message_id")


class MessageMention(models.Model):
    """One resolved mention, indexed for ``GET /api/v1/mentions/``."""

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="+")
    name = models.ForeignKey(AgentName, on_delete=models.CASCADE, related_name="+")

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["message", "name"], name="mention_unique"),
        ]
        indexes = [models.Index(fields=["name", "id"], name="mention_by_name")]

    def __str__(self) -> str:
        return f"@{self.name_id} in {self.message_id}"
