"""Reads that fetch related rows up front and apply visibility rules.

Operator listings (projects, keys, opt-ins) see every project; conversation
reads are limited to the participants of each thread.
"""

from __future__ import annotations

from django.db.models import Prefetch, Q, QuerySet

from common.prepared import Prepared
from mailbox.errors import ConversationNotFound, NameNotFound, NotAParticipant, WorkspaceNotFound
from mailbox.models import (
    AgentName,
    AuditRecord,
    Conversation,
    CrossProjectOptIn,
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


def conversation_get_for_operator(public_id: str) -> Conversation:
    """Any thread, by its public id, for moderation; raises ``conversation_not_found``."""
    conversation = Conversation.objects.filter(public_id=public_id).first()
    if conversation is None:
        raise ConversationNotFound(f"No conversation has the id {public_id!r}.")
    return conversation


# --- conversations (visible to their participants only) ------------------------------

_NOTE_RELATED = (
    "conversation",
    "recipient",
    "next_workspace",
    "sender_name__workspace__project",
)


def conversation_list_for_session(
    session: Session, *, after_id: str | None = None, limit: int = 50
) -> tuple[list[Conversation], bool]:
    """The session's threads, newest activity first, and whether more follow.

    ``after_id`` continues a listing after the conversation of that id (a
    cursor, so that pages stay stable while new notes arrive).
    """
    threads = Conversation.objects.filter(participants__name_id=session.name_id).order_by(
        "-last_note_at", "-id"
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
    return page[:limit], len(page) > limit


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
    return conversation


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
