"""Reads that fetch related rows up front and apply visibility rules.

Operator listings (projects, keys, opt-ins, sessions, notes) see every
project; conversation reads are limited to the participants of each thread.
The credential look-ups that every call starts with are here too, for
``mailbox.callers``: each is one query compiled once (``common.prepared``),
and each session comes back with its name, workspace and project and whether
notes wait for it, so that nothing after authentication reads them again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from django.db import connection
from django.db.models import (
    Count,
    Exists,
    F,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Subquery,
)
from django.db.models.expressions import RawSQL
from django.utils import timezone

from common import limits
from common.prepared import Prepared, PreparedObjects
from common.search.query import Query
from mailbox import credentials
from mailbox.errors import (
    ConversationNotFound,
    KeyNotFound,
    NameNotFound,
    NotAParticipant,
    NoteNotFound,
    ProjectNotFound,
    WorkspaceNotFound,
)
from mailbox.models import (
    NOTE_INDEX,
    AgentName,
    AuditRecord,
    Conversation,
    CrossProjectOptIn,
    DailyUsage,
    FreedToken,
    Note,
    Participant,
    Project,
    ProjectKey,
    Session,
    Workspace,
)


def optin_allows(project: Project, *, source: Project) -> bool:
    """Whether ``project`` accepts notes and room joins from ``source``."""
    if project.pk == source.pk or project.accept_all_projects:
        return True
    return CrossProjectOptIn.objects.filter(project=project, source=source).exists()


def notes_pending_count() -> int:
    """How many notes wait for delivery, in one query.

    Every pending note is in the partial index ``note_pending_next`` (its
    condition is only ``delivered_at IS NULL``), so the count reads the
    pending notes, never the delivered history.
    """
    return Note.objects.filter(delivered_at__isnull=True).count()


def project_get_for_operator(slug: str) -> Project:
    """The project with this slug; raises ``project_not_found``."""
    project = Project.objects.filter(slug=slug).first()
    if project is None:
        raise ProjectNotFound(f"No project {slug!r}.")
    return project


def key_get_for_operator(prefix_or_key: str) -> ProjectKey:
    """A key by its prefix (``abcd1234`` or ``plumb_key_abcd1234``) or the whole key.

    Raises ``key_not_found``; a whole key must match its digest, not just its prefix.
    """
    text = prefix_or_key.strip()
    parsed = credentials.parse(text)
    if parsed is not None:
        key = ProjectKey.objects.filter(prefix=parsed.prefix).first()
        if key is not None and credentials.matches(text, key.key_hash):
            return key
        raise KeyNotFound()
    prefix = text.removeprefix("plumb_key_").rstrip("_")
    key = ProjectKey.objects.filter(prefix=prefix).first() if prefix else None
    if key is None:
        raise KeyNotFound(f"No project key with prefix {prefix!r}.")
    return key


def project_list() -> QuerySet[Project]:
    """Every project, by slug."""
    return Project.objects.order_by("slug")


def key_list(project: Project | None = None) -> QuerySet[ProjectKey]:
    """Project keys, newest first within each project; all projects when ``project`` is None.

    ``key_hash`` is deferred: a listing never needs it, so it never leaves the database.
    """
    keys = ProjectKey.objects.select_related("project").defer("key_hash")
    if project is not None:
        keys = keys.filter(project=project)
    return keys.order_by("project__slug", "-created_at", "prefix")


def optin_list(project: Project | None = None) -> QuerySet[CrossProjectOptIn]:
    """Opt-ins granted by ``project`` (who may send to it); all of them when it is None."""
    optins = CrossProjectOptIn.objects.select_related("project", "source")
    if project is not None:
        optins = optins.filter(project=project)
    return optins.order_by("project__slug", "source__slug")


def workspace_get_for_operator(project: Project, slug: str) -> Workspace:
    """A workspace of ``project``; raises ``workspace_not_found``."""
    workspace = Workspace.objects.filter(project=project, slug=slug).first()
    if workspace is None:
        raise WorkspaceNotFound(f"No workspace {slug!r} in project {project.slug!r}.")
    return workspace


def name_get_for_operator(handle: str) -> AgentName | None:
    """The agent name with this handle and its workspace, or None if none claimed it."""
    return AgentName.objects.select_related("workspace__project").filter(handle=handle).first()


def name_sessions_open(handle: str) -> list[Session]:
    """The open sessions of a name (at most one, by constraint); ``name_not_found``."""
    name = name_get_for_operator(handle)
    if name is None:
        raise NameNotFound(f"No agent has the name {handle!r}.")
    return list(
        Session.objects.filter(name=name, ended_at__isnull=True)
        .select_related("name", "workspace__project")
        .order_by("started_at", "id")
    )


@dataclass(frozen=True)
class PolicyUse:
    """A project's caps and how much of each it uses now (SPEC §8), for operators."""

    daily_note_budget: int
    notes_used_today: int
    daily_message_budget: int
    messages_used_today: int
    max_connected_sessions: int
    connected: int


def project_policy_use(project: Project, *, now: datetime | None = None) -> PolicyUse:
    """Today's budget counters (UTC) and the connected sessions: two queries."""
    now = now or timezone.now()
    used = dict(
        DailyUsage.objects.filter(project=project, day=now.astimezone(UTC).date()).values_list(
            "what", "used"
        )
    )
    return PolicyUse(
        daily_note_budget=project.daily_note_budget,
        notes_used_today=used.get(DailyUsage.What.NOTES, 0),
        daily_message_budget=project.daily_message_budget,
        messages_used_today=used.get(DailyUsage.What.MESSAGES, 0),
        max_connected_sessions=project.max_connected_sessions,
        connected=Session.objects.connected(now).filter(workspace__project=project).count(),
    )


def session_list_for_operator(
    project: Project | None = None, *, connected: bool = False, limit: int = 100
) -> list[Session]:
    """Sessions, newest started first, at most ``limit``; all projects when None.

    ``connected`` keeps those whose token still works (``Session.objects.connected``).
    Token hashes are deferred: a listing never needs them.
    """
    sessions = Session.objects.connected() if connected else Session.objects.all()
    if project is not None:
        sessions = sessions.filter(workspace__project=project)
    return list(
        sessions.select_related("name", "workspace__project")
        .defer("token_hash")
        .order_by("-started_at", "-id")[:limit]
    )


def audit_list(project_slug: str | None = None, *, limit: int = 50) -> list[AuditRecord]:
    """The newest audit records first, at most ``limit``; all projects when None.

    Filtered by the slug stored in each record, like the admin's search: a
    record outlives what it names, so a deleted project's trail stays findable.
    """
    records = AuditRecord.objects.all()
    if project_slug is not None:
        records = records.filter(project_slug=project_slug)
    return list(records.order_by("-created_at", "-id")[:limit])


# A note's delivery state (SPEC §1): one condition on the note's own row per
# state, no two true of the same note. The operator listing filters on one and
# labels each note with the one that holds, so a state is added here alone.
# A note's state (``Note.state``) as a filter: a bounce settles ``delivered_at``
# too (SPEC §3.6), so only ``bounced_at`` tells a bounced note from a delivered one.
NOTE_STATES: dict[str, Q] = {
    Note.State.WAITING: Q(delivered_at__isnull=True),
    Note.State.DELIVERED: Q(delivered_at__isnull=False, bounced_at__isnull=True),
    Note.State.BOUNCED: Q(bounced_at__isnull=False),
}


def note_list_for_operator(
    project: Project | None = None, *, state: str | None = None, limit: int = 100
) -> list[Note]:
    """Notes, newest first, at most ``limit``; all projects when None.

    A project's notes are those its agents sent and those addressed to its
    names or workspaces, so both ends of a cross-project thread find them.
    ``state`` is a key of ``NOTE_STATES``. Bodies are deferred: the listing
    says who wrote to whom and when, never what.
    """
    notes = Note.objects.all()
    if project is not None:
        notes = notes.filter(
            Q(sender_name__workspace__project=project)
            | Q(recipient__workspace__project=project)
            | Q(next_workspace__project=project)
        )
    if state is not None:
        notes = notes.filter(NOTE_STATES[state])
    return list(
        notes.select_related(
            "conversation", "sender_name__workspace__project", "recipient", "next_workspace"
        )
        .defer("body")
        .order_by("-id")[:limit]
    )


def notes_matching(notes: QuerySet[Note], query: Query) -> QuerySet[Note]:
    """``notes`` narrowed to those whose body matches ``query``: the operators' search
    (the admin), through the index the agents' search reads (``rooms.selectors.search``)."""
    NOTE_INDEX.catch_up()  # SQLite's queued words first (common/search/index.py)
    sql, params = NOTE_INDEX.matching_ids(query, vendor=connection.vendor)
    return notes.filter(pk__in=RawSQL(sql, params))


def conversation_get_for_operator(public_id: str) -> Conversation:
    """Any thread, by its public id, for moderation; raises ``conversation_not_found``."""
    conversation = Conversation.objects.filter(public_id=public_id).first()
    if conversation is None:
        raise ConversationNotFound(f"No conversation has the id {public_id!r}.")
    return conversation


# --- conversations (visible to their participants only) ------------------------------

# Everything a note's JSON shows: its thread, addressee, sender (with its
# workspace and project) and, once delivered, the name of the receiving session.
_NOTE_RELATED = (
    "conversation",
    "recipient",
    "next_workspace",
    "sender_name__workspace__project",
    "delivered_to__name",
)


def conversation_list_for_session(
    session: Session, *, after_id: str | None = None, limit: int = 50
) -> tuple[list[Conversation], bool]:
    """The session's threads, newest activity first, and whether more follow.

    ``after_id`` continues a listing after the conversation of that id (a
    cursor, so that pages stay stable while new notes arrive). Each thread
    comes with its participants and ``awaiting_reply_from``; three queries
    whatever the page holds.
    """
    last_written = (
        Note.objects.filter(conversation=OuterRef("pk"), sender_name__isnull=False)
        .order_by("-position")
        .values("pk")[:1]
    )
    threads = (
        Conversation.objects.filter(participants__name_id=session.name_id)
        .annotate(last_written_pk=Subquery(last_written))
        .order_by("-last_note_at", "-id")
    )
    if after_id:
        anchor = threads.filter(public_id=after_id).values("last_note_at", "id").first()
        if anchor is None:
            raise ConversationNotFound("after_id names no conversation of yours.")
        threads = threads.filter(
            Q(last_note_at__lt=anchor["last_note_at"])
            | Q(last_note_at=anchor["last_note_at"], id__lt=anchor["id"])
        )
    page = list(
        threads.prefetch_related(
            Prefetch(
                "participants",
                queryset=Participant.objects.select_related("name__workspace__project"),
            )
        )[: limit + 1]
    )
    page, has_more = page[:limit], len(page) > limit
    last_notes = Note.objects.select_related("recipient", "delivered_to__name").in_bulk(
        [t.last_written_pk for t in page if t.last_written_pk is not None]
    )
    for thread in page:
        thread.awaiting_reply_from = awaiting_reply_from(last_notes.get(thread.last_written_pk))
    return page, has_more


def awaiting_reply_from(last_written: Note | None) -> list[str]:
    """Who the thread waits to hear from: the addressee of its last note by an agent.

    Nobody has written since that note, by definition: its recipient's name,
    or for a "next" note whoever it was delivered to ("next" while it waits).
    Nobody once it bounced, or in a thread with no such note.
    """
    if last_written is None or last_written.bounced_at is not None:
        return []
    if last_written.next_workspace_id is None:
        return [last_written.recipient.handle]
    if last_written.delivered_at is None:
        return ["next"]
    receiver = last_written.delivered_to
    return [receiver.name.handle] if receiver is not None else []


def conversation_get_for_session(session: Session, public_id: str) -> Conversation:
    """One thread with its participants and notes; ``not_a_participant`` for outsiders."""
    conversation = (
        Conversation.objects.filter(public_id=public_id)
        .prefetch_related(
            Prefetch(
                "participants",
                queryset=Participant.objects.select_related("name__workspace__project"),
            ),
            Prefetch(
                "notes",
                queryset=Note.objects.select_related(*_NOTE_RELATED).order_by("position"),
            ),
        )
        .first()
    )
    if conversation is None:
        raise ConversationNotFound()
    if not any(p.name_id == session.name_id for p in conversation.participants.all()):
        raise NotAParticipant()
    written = [n for n in conversation.notes.all() if n.sender_name_id is not None]
    conversation.awaiting_reply_from = awaiting_reply_from(written[-1] if written else None)
    return conversation


# --- notes sent by a name (SPEC §3.6) ---------------------------------------------------


def note_state_condition(state: str) -> Q:
    """The notes in ``state`` (waiting, delivered or bounced), as a filter."""
    return NOTE_STATES[state]


def notes_sent_for_session(
    session: Session,
    *,
    state: str | None = None,
    after_id: str | None = None,
    limit: int = limits.PAGE_DEFAULT,
) -> tuple[list[Note], bool]:
    """Notes sent by the caller's name, from any of its sessions, newest first, in
    ``state`` if given, and whether more follow. One query (two with ``after_id``).

    ``after_id`` continues after that note (a cursor: new notes do not shift
    the pages); ``note_not_found`` when the name sent no note of that id.
    """
    notes = Note.objects.filter(sender_name_id=session.name_id)
    if state is not None:
        notes = notes.filter(note_state_condition(state))
    if after_id:
        anchor = (
            Note.objects.filter(sender_name_id=session.name_id, public_id=after_id)
            .values_list("id", flat=True)
            .first()
        )
        if anchor is None:
            raise NoteNotFound("after_id names no note you sent.")
        notes = notes.filter(id__lt=anchor)
    page = list(notes.select_related(*_NOTE_RELATED).order_by("-id")[: limit + 1])
    return page[:limit], len(page) > limit


def notes_waiting_ids(name_id: int, *, limit: int) -> list[int]:
    """Ids of the newest ``limit`` notes of a name that still wait."""
    return list(
        Note.objects.filter(sender_name_id=name_id, delivered_at__isnull=True)
        .order_by("-id")
        .values_list("id", flat=True)[:limit]
    )


def notes_settled(note_ids: list[int]) -> bool:
    """Whether any of these notes has been delivered or bounced since it was seen waiting."""
    return Note.objects.filter(pk__in=note_ids, delivered_at__isnull=False).exists()


# The open session of a name, locked until commit, as (id, last_seen_at) rows:
# a name has one at most (a partial unique index). A note binds to it and a
# session start ends it when it went quiet; a session_end racing either waits
# here, and one that committed first makes PostgreSQL re-check ended_at and
# skip the row.
open_sessions_of_name_locked = Prepared(
    lambda name_id: (
        Session.objects.select_for_update()
        .filter(name_id=name_id, ended_at__isnull=True)
        .order_by()
        .values_list("id", "last_seen_at")
    ),
    params=["name_id"],
)


# --- notes waiting for a session (SPEC §3.4) ------------------------------------------


def pending_branches(session_pk, name_id, workspace_id, watermark) -> list[Q]:
    """The three ways a note waits for a session, one per partial index.

    Kept apart so that each can be asked on its own: an OR across them leads
    both planners to scan one partial index whole and filter, which grows
    with the stored notes. Arguments are values or ``OuterRef``s.
    """
    return [
        Q(delivered_at__isnull=True, bound_session_id=session_pk),
        Q(delivered_at__isnull=True, bound_session__isnull=True, recipient_id=name_id),
        Q(delivered_at__isnull=True, next_workspace_id=workspace_id, id__lte=watermark)
        & ~Q(sender_session_id=session_pk),
    ]


def pending_exists() -> Q:
    """Whether notes wait for the session row of the outer query.

    Each credential look-up below asks this in the query that finds the
    session, so a call with nothing pending (nearly every call) needs no
    query of its own for the piggyback (``notes_claim``).
    """
    refs = (OuterRef("pk"), OuterRef("name_id"), OuterRef("workspace_id"))
    branches = pending_branches(*refs, OuterRef("notes_watermark"))
    first, *rest = [Exists(Note.objects.filter(branch)) for branch in branches]
    for exists in rest:
        first |= exists
    return first


# --- who is calling: the credential look-ups of mailbox.callers ------------------------

# A session comes with everything a call needs of it: its name, its workspace
# and that workspace's project, and whether notes wait for it.
_SESSION_RELATED = ("name", "workspace__project")


def _sessions_with_pending(sessions: QuerySet[Session]) -> QuerySet[Session]:
    return sessions.annotate(notes_maybe_pending=pending_exists())


_session_by_token_prefix = PreparedObjects(
    lambda prefix: _sessions_with_pending(Session.objects.filter(token_prefix=prefix)),
    params=["prefix"],
    related=_SESSION_RELATED,
    annotations=["notes_maybe_pending"],
)
_key_by_prefix = PreparedObjects(
    lambda prefix: ProjectKey.objects.filter(prefix=prefix),
    params=["prefix"],
    related=["project"],
)
_open_session_of_name_with_key = PreparedObjects(
    lambda prefix, workspace, name: _sessions_with_pending(
        Session.objects.filter(
            ended_at__isnull=True,  # at most one such row per name (session_one_open_per_name)
            name__handle=name,
            workspace__slug=workspace,
            workspace__project__keys__prefix=prefix,
        )
    ),
    params=["prefix", "workspace", "name"],
    related=(*_SESSION_RELATED, "workspace__project__keys"),
    annotations=["notes_maybe_pending"],
)
_session_by_mcp_session_id = PreparedObjects(
    lambda mcp_session_id, project_id: _sessions_with_pending(
        Session.objects.filter(
            mcp_session__public_id=mcp_session_id, workspace__project_id=project_id
        )
    ),
    params=["mcp_session_id", "project_id"],
    related=_SESSION_RELATED,
    annotations=["notes_maybe_pending"],
)


def session_for_token_prefix(prefix: str) -> Session | None:
    """The session whose token has this prefix, ended or not: every REST session call's query."""
    found = _session_by_token_prefix.first(prefix=prefix)
    return found and found[""]


def key_for_prefix(prefix: str) -> ProjectKey | None:
    """The project key with this prefix and its project, revoked or not: every REST start's."""
    found = _key_by_prefix.first(prefix=prefix)
    return found and found[""]


@dataclass(frozen=True)
class CredentialRows:
    """The rows a credential and the names sent with it point at; nothing checked yet.

    ``session`` is a session token's session, or the session an
    ``Mcp-Session-Id`` names in the key's project (ended ones too, so that
    ``mailbox.callers`` can say which); ``key`` is a project key's row;
    ``named`` the open session of the workspace and name sent with a key,
    found with the key in one query (it may have expired).
    """

    key: ProjectKey | None = None
    session: Session | None = None
    named: Session | None = None


def credential_rows(
    credential: credentials.ParsedCredential,
    *,
    workspace: str | None,
    name: str | None,
    mcp_session_id: str | None,
) -> CredentialRows:
    """Read what a credential names, in one query for each way of naming a session.

    A key with a workspace and a name is how the README's MCP configuration
    calls plumb, on every tool call: the key comes with the open session of
    that name, and with whether notes wait for it, as a token's session
    does. Only when no such session is open is the key read alone. An
    ``Mcp-Session-Id`` of another project is not found, like an unknown one,
    so ids say nothing across projects.
    """
    if credential.kind == credentials.SESSION_TOKEN:
        found = _session_by_token_prefix.first(prefix=credential.prefix)
        return CredentialRows(session=found and found[""])
    if workspace is not None and name is not None:
        found = _open_session_of_name_with_key.first(
            prefix=credential.prefix, workspace=workspace, name=name
        )
        if found is not None:
            return CredentialRows(key=found["workspace__project__keys"], named=found[""])
    found = _key_by_prefix.first(prefix=credential.prefix)
    if found is None or name is not None or mcp_session_id is None:
        return CredentialRows(key=found and found[""])
    key = found[""]
    session = _session_by_mcp_session_id.first(
        mcp_session_id=mcp_session_id, project_id=key.project_id
    )
    return CredentialRows(key=key, session=session and session[""])


def freed_token_for_prefix(prefix: str) -> FreedToken | None:
    """A token of a session whose name was freed; looked up only for a token that
    matched no session."""
    return FreedToken.objects.filter(token_prefix=prefix).first()


def session_connected_of_name(project: Project, *, workspace: str, name: str) -> Session | None:
    """The connected session of ``name`` in ``workspace`` of ``project``, or None."""
    return (
        Session.objects.connected()
        .select_related("name", "workspace__project")
        .filter(name__handle=name, workspace__slug=workspace, workspace__project_id=project.pk)
        .first()
    )


# --- people (SPEC §5.1) -----------------------------------------------------------------


def person_session_for_user(user_id: int) -> Session | None:
    """The session the admin acts through for this user, with its name, the
    person and the people's workspace and project; None before they have a
    handle. One query."""
    return (
        Session.objects.filter(name__person__user_id=user_id, end_reason=Session.EndReason.PERSON)
        .select_related("name__person", "workspace__project")
        .order_by("-id")
        .first()
    )


def notes_waiting_by_conversation(name_id: int, conversation_ids: list[int]) -> dict[int, int]:
    """How many notes wait for a name in each of these threads, by thread id (one query)."""
    rows = (
        Note.objects.filter(
            conversation_id__in=conversation_ids,
            recipient_id=name_id,
            delivered_at__isnull=True,
        )
        .order_by()
        .values_list("conversation_id")
        .annotate(count=Count("pk"))
    )
    return dict(rows)


def notes_last_by_conversation(conversation_ids: list[int]) -> dict[int, Note]:
    """The last note of each of these threads, with its sender, by thread id (one query)."""
    notes = Note.objects.filter(
        conversation_id__in=conversation_ids, position=F("conversation__last_position")
    ).select_related("sender_name")
    return {note.conversation_id: note for note in notes}
