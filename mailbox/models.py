"""Who may talk: projects, their keys and workspaces, agent names and sessions.

These rows are the identity layer both halves of plumb share; the mailbox
and rooms only add what they carry. Every uniqueness rule that a service
relies on is also a named database constraint, because services check first
for a friendly error but the constraint is what holds under concurrency.
"""

from datetime import datetime, timedelta

from django.conf import settings
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from common import limits
from common.ids import new_public_id
from common.search.index import SearchIndex

slug_validator = RegexValidator(limits.SLUG_PATTERN, limits.SLUG_MESSAGE)
handle_validator = RegexValidator(limits.HANDLE_PATTERN, limits.HANDLE_MESSAGE)


def session_public_id() -> str:
    return new_public_id("ses")


# A week: long enough for an agent idle on its human, short enough that a note
# nobody will pick up comes back to its sender (SPEC §8).
NOTE_TTL_DEFAULT = 7 * 24 * 3600


def room_flood_limit_default() -> int:
    """A new project's flood limit: the site's (``PLUMB_ROOM_FLOOD_LIMIT``, 120 unless set)."""
    return settings.PLUMB_ROOM_FLOOD_LIMIT


class AuthorKind(models.TextChoices):
    """Who wrote something an agent reads: the ``kind`` of every ``from`` and ``author``.

    A name is an agent's or a person's (``AgentName.kind``); ``system`` is plumb
    itself (a bounce notice), which holds no name.
    """

    AGENT = "agent"
    HUMAN = "human"
    SYSTEM = "system"


class Project(models.Model):
    slug = models.CharField(max_length=limits.NAME_MAX, unique=True, validators=[slug_validator])
    name = models.CharField(max_length=limits.PROJECT_NAME_MAX, blank=True)
    mailbox_enabled = models.BooleanField(
        default=True, help_text="Whether sessions of this project may send and receive notes."
    )
    max_exchanges = models.PositiveIntegerField(
        default=20,
        validators=[MinValueValidator(1)],
        help_text="How many notes a new conversation may hold (frozen per conversation).",
    )
    accept_all_projects = models.BooleanField(
        default=False,
        help_text="Accept notes and room joins from every project, without per-project opt-ins.",
    )
    note_ttl = models.PositiveIntegerField(
        "note TTL (seconds)",
        default=NOTE_TTL_DEFAULT,
        validators=[MinValueValidator(1)],
        help_text="Seconds a note sent by this project's agents may wait to be picked up; "
        "then it bounces, and its sender gets a note from plumb saying so.",
    )
    # Operator policy (SPEC §8): every cap is 0 for "none" but the flood limit's default.
    daily_note_budget = models.PositiveIntegerField(
        default=0,
        help_text="Notes this project's agents may send per day (UTC); then 429 "
        "budget_exhausted until midnight UTC. 0: no budget.",
    )
    daily_message_budget = models.PositiveIntegerField(
        default=0,
        help_text="Room messages and reviews this project's agents may post per day (UTC); "
        "then 429 budget_exhausted until midnight UTC. 0: no budget.",
    )
    room_flood_limit = models.PositiveIntegerField(
        default=room_flood_limit_default,
        help_text="Messages agents may post in a minute in one of this project's rooms; past "
        "it the room pauses itself for a minute (423 room_paused). People posting from the "
        "admin are never paused. 0: no limit.",
    )
    max_connected_sessions = models.PositiveIntegerField(
        default=0,
        help_text="Sessions of this project that may be connected at once; past it a start "
        "gets 429 too_many_sessions. 0: no cap.",
    )
    retention_days = models.PositiveIntegerField(
        default=0,
        help_text="Days notes and room events are kept; older ones are purged every hour "
        "(undelivered notes bounce first). 0: keep everything.",
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.CheckConstraint(
                condition=Q(max_exchanges__gte=1), name="project_max_exchanges_at_least_1"
            ),
            models.CheckConstraint(
                condition=Q(note_ttl__gte=1), name="project_note_ttl_at_least_1"
            ),
        ]

    def __str__(self) -> str:
        return self.slug


class CrossProjectOptIn(models.Model):
    """``project`` accepts traffic (notes, room joins) from ``source``."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="optins")
    source = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="optins_granted_to")
    created_by = models.CharField(max_length=limits.ACTOR_MAX, help_text="Operator who granted it.")
    created_at = models.DateTimeField(default=timezone.now)
    note = models.TextField(blank=True)

    class Meta:
        verbose_name = "cross-project opt-in"
        ordering = ["project__slug", "source__slug"]
        constraints = [
            models.UniqueConstraint(fields=["project", "source"], name="optin_unique_pair"),
            models.CheckConstraint(condition=~Q(project=models.F("source")), name="optin_not_self"),
        ]

    def __str__(self) -> str:
        return f"{self.project} accepts {self.source}"


class ProjectKey(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="keys")
    prefix = models.CharField(max_length=8, unique=True, editable=False)
    key_hash = models.CharField(max_length=limits.CREDENTIAL_HASH_LENGTH, editable=False)
    label = models.CharField(max_length=limits.KEY_LABEL_MAX, blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    created_by = models.CharField(max_length=limits.ACTOR_MAX, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["project__slug", "-created_at"]

    def __str__(self) -> str:
        return f"plumb_key_{self.prefix}_…"

    @property
    def display_prefix(self) -> str:
        return f"plumb_key_{self.prefix}"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class Workspace(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="workspaces")
    slug = models.CharField(max_length=limits.NAME_MAX, validators=[slug_validator])
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["project__slug", "slug"]
        constraints = [
            models.UniqueConstraint(fields=["project", "slug"], name="workspace_unique_slug"),
        ]

    def __str__(self) -> str:
        return f"{self.project.slug}/{self.slug}"


class AgentName(models.Model):
    """A handle, bound for good to the workspace that first claimed it.

    A generated name nobody relies on is *disposable*: once its sessions have
    been over for a while and nothing refers to it, ``names_free`` deletes it
    and the generator may hand the handle out again. Everything that makes a
    name matter clears the flag for good: a claim by name, an operator's
    audit record naming it, or history found referring to it.
    """

    handle = models.CharField(
        max_length=limits.NAME_MAX, unique=True, validators=[handle_validator]
    )
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="names")
    created_at = models.DateTimeField(default=timezone.now)
    disposable = models.BooleanField(
        default=False,
        editable=False,
        help_text="Generated and relied on by nobody yet: freed once its sessions are over "
        "if nothing refers to it.",
    )
    # People and agents share one namespace of handles (SPEC §1, Person): a
    # person's handle is a name of kind "human" in the people's home workspace
    # (``mailbox.services.people``), so every rule and history row that
    # refers to names works for them unchanged.
    kind = models.CharField(
        max_length=8,
        choices=[(AuthorKind.AGENT, "agent"), (AuthorKind.HUMAN, "human")],
        default=AuthorKind.AGENT,
        editable=False,
    )

    class Meta:
        ordering = ["handle"]
        indexes = [
            # names_free looks only at these; held and chosen names are most rows.
            models.Index(fields=["id"], condition=Q(disposable=True), name="agentname_disposable"),
        ]

    def __str__(self) -> str:
        return self.handle


class SessionQuerySet(models.QuerySet):
    def connected(self, now: datetime | None = None) -> "SessionQuerySet":
        now = now or timezone.now()
        return self.filter(
            ended_at__isnull=True,
            last_seen_at__gte=now - timedelta(seconds=settings.PLUMB_SESSION_TTL),
        )


class Session(models.Model):
    class EndReason(models.TextChoices):
        ENDED = "ended", "ended by its agent or an operator"
        EXPIRED = "expired", "expired, replaced by a new session of its name"
        KEY_REVOKED = "key_revoked", "its project key was revoked"
        # Never open: the admin acts as a person through it (mailbox.services.people).
        PERSON = "person", "a person's, through which the admin acts for them"

    public_id = models.CharField(
        max_length=32, unique=True, default=session_public_id, editable=False
    )
    name = models.ForeignKey(AgentName, on_delete=models.CASCADE, related_name="sessions")
    # Denormalised from the name: "next" delivery filters sessions by workspace.
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="sessions")
    # The key that started it: revoking the key ends it (SPEC §5). SET_NULL,
    # not PROTECT: plumb never deletes a key (revoking keeps the row, the
    # admin refuses deletion), so a key row only goes with its project, whose
    # workspaces and sessions go in the same cascade; PROTECT would refuse
    # that deletion, since it refuses even rows the cascade deletes too. Null
    # also where no key is recorded (rows that predate the column).
    project_key = models.ForeignKey(
        ProjectKey,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        editable=False,
        related_name="sessions",
    )
    token_prefix = models.CharField(max_length=8, unique=True, editable=False)
    token_hash = models.CharField(max_length=limits.CREDENTIAL_HASH_LENGTH, editable=False)
    started_at = models.DateTimeField(default=timezone.now, editable=False)
    last_seen_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)
    # Why it ended, so its token can say so (401 key_revoked rather than
    # session_ended); "" while it is open, and where no reason is recorded
    # (rows that predate the column).
    end_reason = models.CharField(
        max_length=16, choices=EndReason.choices, blank=True, default="", editable=False
    )
    # The highest note id committed when this session started. A "next" note
    # is for this session only if its id is at most this: ids come from the
    # database, so the rule does not depend on server clocks agreeing.
    notes_watermark = models.BigIntegerField(default=0, editable=False)
    # The newest waiting calls of this session (notes, room or activity), as
    # "ticket/expiry" entries: a call whose ticket is gone has been pushed out
    # by newer ones (mailbox/wakeups.py).
    poll_tickets = models.CharField(max_length=128, blank=True, default="", editable=False)

    objects = SessionQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at"]
        constraints = [
            # The database's half of "at most one connected session holds a
            # name": starting a session first ends the name's stale ones, so
            # two racing starts cannot both leave an open session behind.
            models.UniqueConstraint(
                fields=["name"],
                condition=Q(ended_at__isnull=True),
                name="session_one_open_per_name",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name.handle} ({self.public_id})"

    def is_connected(self, now: datetime | None = None) -> bool:
        now = now or timezone.now()
        return self.ended_at is None and self.last_seen_at >= now - timedelta(
            seconds=settings.PLUMB_SESSION_TTL
        )

    @property
    def project(self) -> Project:
        return self.workspace.project


class FreedToken(models.Model):
    """The digest of a session token whose name was freed, with its session.

    A client retrying such a token is no guesser: it gets ``401
    session_ended`` every time, and its retries never count against its
    address as credentials that never existed would (SPEC §2). Kept for
    ``FREED_TOKENS_KEPT`` after the freeing (``names_free``).
    """

    token_prefix = models.CharField(max_length=8, unique=True, editable=False)
    token_hash = models.CharField(max_length=limits.CREDENTIAL_HASH_LENGTH, editable=False)
    freed_at = models.DateTimeField(default=timezone.now, db_index=True, editable=False)

    def __str__(self) -> str:
        return self.token_prefix


def mcp_session_public_id() -> str:
    return new_public_id("mcp")


class McpSession(models.Model):
    """The ``Mcp-Session-Id`` of a handshake-era MCP client, and the session it acts as.

    MCP clients and proxies write session ids into their logs, so the id is
    random and of its own, never the session's token: it is not a credential.
    A request carrying it must still authenticate with its project key, and
    the id only says which of that project's sessions the request acts as.
    It is a row, not process memory, because any server process may answer
    the next request of the same MCP session, also after a restart.
    """

    public_id = models.CharField(
        max_length=32, unique=True, default=mcp_session_public_id, editable=False
    )
    session = models.OneToOneField(
        Session, on_delete=models.CASCADE, related_name="mcp_session", editable=False
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        verbose_name = "MCP session"

    def __str__(self) -> str:
        return self.public_id


class Person(models.Model):
    """A staff user who takes part (SPEC §1, §5.1): their handle, a name of kind ``human``.

    The name outlives the user: deleting the account leaves the handle
    bound to the person's history, as an agent's name is.
    """

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="plumb_person"
    )
    name = models.OneToOneField(
        AgentName, on_delete=models.PROTECT, related_name="person", editable=False
    )
    # The newest mention of this person (a rooms.MessageMention id) the inbox
    # has shown them: the ones above it count as unread.
    mentions_seen = models.BigIntegerField(default=0, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["name__handle"]
        permissions = [
            ("take_part", "Can post, review and answer notes from the admin"),
        ]

    def __str__(self) -> str:
        return self.name.handle


# --- the mailbox ---------------------------------------------------------------------


def conversation_public_id() -> str:
    return new_public_id("cnv")


def note_public_id() -> str:
    return new_public_id("note")


class Conversation(models.Model):
    """A capped thread of notes. ``cap`` is frozen when the thread starts."""

    public_id = models.CharField(
        max_length=32, unique=True, default=conversation_public_id, editable=False
    )
    cap = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    # Counted under the row lock in the transaction that inserts each note,
    # so the cap holds however many replies race.
    notes_count = models.PositiveIntegerField(default=0)
    # The highest position of its notes, taken under the same lock. Above
    # notes_count once plumb has written in the thread: its notices (bounces)
    # take a position but not an exchange.
    last_position = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    last_note_at = models.DateTimeField(default=timezone.now)
    locked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-last_note_at", "-id"]
        indexes = [models.Index(fields=["-last_note_at", "-id"], name="conversation_activity")]
        constraints = [
            models.CheckConstraint(
                condition=Q(notes_count__lte=models.F("cap")), name="conversation_within_cap"
            ),
            models.CheckConstraint(
                condition=Q(last_position__gte=models.F("notes_count")),
                name="conversation_positions_cover_notes",
            ),
        ]

    def __str__(self) -> str:
        return self.public_id

    @property
    def exchanges_left(self) -> int:
        return max(self.cap - self.notes_count, 0)


class Participant(models.Model):
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="participants"
    )
    name = models.ForeignKey(AgentName, on_delete=models.CASCADE, related_name="participations")
    joined_at = models.DateTimeField(default=timezone.now)
    # Someone who has written in the thread consented to it: replies to them
    # skip the cross-project opt-in check (SPEC §3.2).
    has_written = models.BooleanField(default=False)

    class Meta:
        ordering = ["joined_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["conversation", "name"], name="participant_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.name} in {self.conversation}"


class Note(models.Model):
    class Delivery(models.TextChoices):
        SESSION = "session"
        NAME = "name"
        NEXT = "next"

    class State(models.TextChoices):
        """Where a note stands, as its participants see it (derived: ``state``)."""

        WAITING = "waiting"
        DELIVERED = "delivered"
        BOUNCED = "bounced"

    public_id = models.CharField(max_length=32, unique=True, default=note_public_id, editable=False)
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="notes")
    position = models.PositiveIntegerField()
    # PROTECT: a note is part of its thread's history, which another party
    # reads too; deleting its sender, recipient or "next" workspace must not
    # take it along (SPEC §3.3: the thread history shows every note).
    # Null for plumb's own notes (sender_kind "system"); indexed with the id
    # by note_by_sender, for the sender's list of sent notes.
    sender_name = models.ForeignKey(
        AgentName,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="notes_sent",
        db_index=False,
    )
    sender_kind = models.CharField(
        max_length=8, choices=AuthorKind.choices, default=AuthorKind.AGENT, editable=False
    )
    sender_session = models.ForeignKey(
        Session, on_delete=models.SET_NULL, null=True, related_name="notes_sent"
    )
    # Exactly one of recipient / next_workspace is set (see the check constraint).
    recipient = models.ForeignKey(
        AgentName, on_delete=models.PROTECT, null=True, blank=True, related_name="notes_received"
    )
    next_workspace = models.ForeignKey(
        Workspace, on_delete=models.PROTECT, null=True, blank=True, related_name="next_notes"
    )
    body = models.TextField(help_text="Secret-scrubbed before it was stored.")
    created_at = models.DateTimeField(default=timezone.now)
    # NULL, not "", for "no key": the unique constraint applies to keyed notes only.
    idempotency_key = models.CharField(  # noqa: DJ001
        max_length=limits.IDEMPOTENCY_KEY_MAX, null=True, blank=True
    )
    delivery = models.CharField(max_length=8, choices=Delivery.choices)
    bound_session = models.ForeignKey(
        Session, on_delete=models.SET_NULL, null=True, blank=True, related_name="bound_notes"
    )
    delivered_to = models.ForeignKey(
        Session, on_delete=models.SET_NULL, null=True, blank=True, related_name="notes_delivered"
    )
    # When the note stopped waiting: delivered (delivered_to set), or bounced
    # (bounced_at set to the same time). A bounce is a conditional UPDATE on
    # this column, as a claim is, so whichever reaches the row first wins, and
    # every pending-notes query (and partial index) leaves bounced notes out
    # unchanged. Agents see null here for a bounced note: ``state`` says which.
    delivered_at = models.DateTimeField(null=True, blank=True)
    bounced_at = models.DateTimeField(null=True, blank=True, editable=False)
    # On plumb's notice that a note bounced: that note, by its public id (the
    # representation shows it without a join).
    bounce_of = models.ForeignKey(
        "self",
        to_field="public_id",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        editable=False,
        related_name="+",
        db_index=False,
    )
    # Set by the conditional UPDATE that claims (or bounces) the note, then
    # used to read back exactly the rows this claim won.
    claim = models.CharField(max_length=32, null=True, blank=True, editable=False)  # noqa: DJ001

    class Meta:
        ordering = ["conversation_id", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["conversation", "position"], name="note_unique_position"
            ),
            models.UniqueConstraint(
                fields=["sender_name", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="note_unique_idempotency_key",
            ),
            models.CheckConstraint(
                condition=Q(recipient__isnull=True, next_workspace__isnull=False)
                | Q(recipient__isnull=False, next_workspace__isnull=True),
                name="note_one_addressee",
            ),
            # plumb's notes, and only they, have no sender name.
            models.CheckConstraint(
                condition=Q(sender_kind=AuthorKind.SYSTEM, sender_name__isnull=True)
                | (~Q(sender_kind=AuthorKind.SYSTEM) & Q(sender_name__isnull=False)),
                name="note_system_has_no_sender",
            ),
            # A bounced note has one notice: the bounce's backstop if it ever ran twice.
            models.UniqueConstraint(
                fields=["bounce_of"],
                condition=Q(bounce_of__isnull=False),
                name="note_one_bounce_notice",
            ),
        ]
        indexes = [
            # The pending-notes lookup runs on every request; these partial
            # indexes hold only undelivered notes, so it stays cheap however
            # many notes were ever delivered.
            # Each matches one branch of the lookup exactly (bound to a
            # session, or to a name only), so no planner reads the unbound
            # notes of every name to find one name's.
            models.Index(
                fields=["bound_session"],
                condition=Q(delivered_at__isnull=True, bound_session__isnull=False),
                name="note_pending_bound",
            ),
            models.Index(
                fields=["recipient"],
                condition=Q(delivered_at__isnull=True, bound_session__isnull=True),
                name="note_pending_name",
            ),
            models.Index(
                fields=["next_workspace"],
                condition=Q(delivered_at__isnull=True),
                name="note_pending_next",
            ),
            models.Index(fields=["claim"], condition=Q(claim__isnull=False), name="note_claim"),
            # A name's sent notes, newest first (GET /api/v1/notes/sent/).
            models.Index(fields=["sender_name", "id"], name="note_by_sender"),
            # Bounces are rare: counting the recent ones reads only them.
            models.Index(
                fields=["bounced_at"], condition=Q(bounced_at__isnull=False), name="note_bounced"
            ),
        ]

    def __str__(self) -> str:
        return self.public_id

    @property
    def to_display(self) -> str:
        return "next" if self.next_workspace_id else self.recipient.handle

    @property
    def state(self) -> str:
        if self.delivered_at is None:
            return self.State.WAITING.value
        return (self.State.DELIVERED if self.bounced_at is None else self.State.BOUNCED).value


# --- operator policy ----------------------------------------------------------------


class DailyUsage(models.Model):
    """How much of a daily budget a project used on one UTC day (SPEC §8).

    A row per (project, day, what), counted by one conditional upsert in the
    transaction of the write it counts (``mailbox.services.budgets``), so
    racing writers queue on the row and the budget holds exactly. Written
    only for projects with a budget; the purge drops past days' rows.
    """

    class What(models.TextChoices):
        NOTES = "notes"
        MESSAGES = "messages"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    what = models.CharField(max_length=8, choices=What.choices)
    used = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "day", "what"], name="daily_usage_unique_day"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.project_id} {self.day} {self.what}: {self.used}"


# The notes' full-text index: a table beside mailbox_note, outside the ORM
# (common/search/index.py). note_leave writes each note's row in its own
# transaction; a deleted note's row goes with it (a trigger).
NOTE_INDEX = SearchIndex(table="mailbox_note_search", source="mailbox_note", key="note_id")


# --- operators' audit trail ----------------------------------------------------------


class AuditRecord(models.Model):
    """Who did what to which target, when and why: one row per operator action.

    Written by the services themselves, so the admin, the ``plumb`` command
    and any future front door are recorded alike. Never edited or deleted.
    """

    actor = models.CharField(
        max_length=limits.ACTOR_MAX, help_text="admin:<user> or cli:<os user>."
    )
    action = models.CharField(max_length=40, db_index=True)
    project = models.ForeignKey(
        Project, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # Slugs and ids are stored as text, so the record outlives what it names.
    project_slug = models.CharField(max_length=limits.NAME_MAX, blank=True, db_index=True)
    room_slug = models.CharField(max_length=limits.NAME_MAX, blank=True, db_index=True)
    target = models.CharField(max_length=limits.AUDIT_TARGET_MAX, blank=True)
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M} {self.actor} {self.action} {self.target}"
