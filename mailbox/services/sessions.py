"""Sessions and the names they hold: start, end, touch; generated and reserved names.

A session is one connection of an agent under a name in a workspace, with
a bearer token of its own, started with a project key that it records.

Generated names come from a space that cannot run out: ``adjective-animal-NN``
while those last, then the same with 4, 6, 8... digits. A generated name that
nobody came to rely on is freed once its sessions are over (``names_free``),
so a client that connects again and again without a name does not use up the
readable ones.
"""

from __future__ import annotations

import functools
import operator
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, connection, models, transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from common import groupcommit, limits, metrics, wake
from common.errors import ValidationFailed
from common.pause import pause_point
from common.prepared import Prepared, PreparedInsert, PreparedObjects
from mailbox import credentials, wakeups
from mailbox.errors import (
    InvalidName,
    KeyRevoked,
    NameInUse,
    NameTaken,
    TooManySessions,
    WorkspaceNotFound,
)
from mailbox.models import (
    AgentName,
    AuthorKind,
    FreedToken,
    McpSession,
    Note,
    Project,
    ProjectKey,
    Session,
    Workspace,
)
from mailbox.selectors import open_sessions_of_name_locked
from mailbox.services.audit import audit_record
from mailbox.services.delivery import notes_unbind

_HANDLE_RE = re.compile(limits.HANDLE_PATTERN)


_ADJECTIVES = (  # noqa: SIM905 - a word list reads better as prose
    "amber azure brave bright brisk calm clever cobalt coral crisp dapper eager fair "
    "fleet gentle glad golden hazel honest jolly keen kind lively lucid merry mellow "
    "nimble noble olive plucky quick quiet rapid ruby sage silver steady sunny swift "
    "tidy topaz vivid warm wise witty zesty"
).split()
_ANIMALS = (  # noqa: SIM905 - a word list reads better as prose
    "badger beaver bison crane dingo dolphin eagle falcon ferret finch fox gecko "
    "heron ibis jackal koala lemur lynx marten mole newt ocelot otter owl panda "
    "puffin quail raven robin salmon seal shrike stoat swift tapir tern toucan vole "
    "walrus wombat wren yak zebra"
).split()


# Digits of a generated name's number: two (swift-otter-42; 178,020 names in
# all) while free ones are drawn, then four, six... Each width is tried only
# when every draw of the one before was taken, and holds a hundred times
# more, so generation does not run out: the widest (47 characters with the
# longest words, within a handle's 64) would take some 10^33 names in use.
_NUMBER_WIDTHS = range(2, 33, 2)
_DRAWS_PER_WIDTH = 8


def _generated_handles(width: int) -> list[str]:
    """Readable names with a ``width``-digit number, in draw order, without repeats;
    never a reserved one, which no session may hold."""
    low = 10 ** (width - 1)
    handles: dict[str, None] = {}
    for _ in range(_DRAWS_PER_WIDTH):
        number = low + secrets.randbelow(9 * low)
        handle = f"{secrets.choice(_ADJECTIVES)}-{secrets.choice(_ANIMALS)}-{number}"
        if handle not in limits.RESERVED_NAMES:
            handles[handle] = None
    return list(handles)


def handle_check(name: object, *, field: str = "name") -> str:
    """A name a session may claim; raises ``validation_error`` under ``field``.

    Every door that claims a name (REST and MCP session starts, the MCP
    ``Plumb-Name`` header, the admin) checks it here, so ``next`` is refused
    everywhere alike.
    """
    if not isinstance(name, str) or not _HANDLE_RE.match(name):
        raise InvalidName.field(field, limits.HANDLE_MESSAGE)
    if name in limits.RESERVED_NAMES:
        raise InvalidName.field(field, limits.RESERVED_NAME_MESSAGE)
    return name


# Every start runs these; their SQL is built once per process (common.prepared).
_workspace_of_project = PreparedObjects(
    lambda project_id, slug: Workspace.objects.filter(project_id=project_id, slug=slug),
    params=["project_id", "slug"],
    related=["project"],
)
_key_revoked_at = Prepared(
    lambda pk: (
        ProjectKey.objects.select_for_update().filter(pk=pk).order_by().values_list("revoked_at")
    ),
    params=["pk"],
)
_name_locked = PreparedObjects(
    lambda handle: AgentName.objects.select_for_update().filter(handle=handle),
    params=["handle"],
)
# The newest note so far: "next" notes up to it are not for the new session.
_highest_note = Prepared(lambda: Note.objects.order_by("-id").values_list("id")[:1], params=[])
_insert_name = PreparedInsert(AgentName)
_insert_session = PreparedInsert(Session)


@dataclass(frozen=True)
class StartedSession:
    session: Session
    token: str  # shown once; never stored


def session_start(
    project_key: ProjectKey,
    *,
    workspace_slug: str,
    name: str | None = None,
    on_started: Callable[[Session], object] | None = None,
) -> StartedSession:
    """Attach a new session to a workspace under a name; it records ``project_key``.

    Raises ``workspace_not_found`` (also for the people's workspace, where no
    agent starts a session), ``validation_error`` (malformed or reserved name),
    ``name_taken`` (bound to another workspace, or a person's handle),
    ``name_in_use`` (held by a connected session), ``key_revoked``
    (``project_key`` was revoked, even after the caller's authentication read
    it) and ``too_many_sessions`` (the project's ``max_connected_sessions``
    are connected; ``_check_session_cap``). Stale sessions of the name are
    ended here, so that the partial unique index on open sessions stays
    satisfiable. Without ``name``, generated names that are over are freed
    first (``names_free``), then a free one is drawn; the name is disposable
    until someone relies on it, and claiming it by name here does.

    Locks the key row, then the name row, then the name's open sessions,
    then (with a session cap) the project row. The key lock is what orders a
    start against ``key_revoke`` (see there): the start either commits
    before the revocation's ending statement runs, and is ended by it, or
    reads the revoked key and refuses. Starts with one
    key therefore queue on PostgreSQL for the few milliseconds of each
    other's transaction (the per-key rate limit bounds how many there are).
    Each attempt is a transaction of its own, which no caller may wrap; a
    caller that must write beside the new session, all or nothing, passes
    ``on_started``, which runs inside that transaction.
    """
    found = _workspace_of_project.first(project_id=project_key.project_id, slug=workspace_slug)
    if found is None:
        raise WorkspaceNotFound(f"No workspace {workspace_slug!r} in this project.")
    workspace = found[""]
    if workspace.project.slug == limits.PEOPLE_PROJECT:
        # people: they act from the admin (mailbox.services.people), never with a key.
        raise WorkspaceNotFound(f"No workspace {workspace_slug!r} in this project.")
    if name is not None:
        return _start_named(project_key, workspace, handle_check(name), on_started=on_started)
    # Names that are over make room before one is drawn: the short form
    # stays available however often clients connect without a name.
    names_free()
    for width in _NUMBER_WIDTHS:
        drawn = _generated_handles(width)
        # One query skips the names in use, so a crowded short form costs one
        # look before the next width, not a failed transaction per draw.
        taken = set(AgentName.objects.filter(handle__in=drawn).values_list("handle", flat=True))
        for handle in drawn:
            if handle in taken:
                continue
            try:
                return _start_named(
                    project_key, workspace, handle, fresh_only=True, on_started=on_started
                )
            except (NameInUse, NameTaken):
                continue  # a concurrent start took it since the look
    raise NameInUse("Could not generate a free name; pass one explicitly.")


def _start_named(
    project_key: ProjectKey,
    workspace: Workspace,
    handle: str,
    *,
    fresh_only: bool = False,
    on_started: Callable[[Session], object] | None = None,
) -> StartedSession:
    attempt = functools.partial(
        _try_start_named,
        project_key,
        workspace,
        handle,
        fresh_only=fresh_only,
        on_started=on_started,
    )
    try:
        return attempt()
    except IntegrityError:
        # A racing start created the name or an open session first (possible on
        # PostgreSQL, where nothing locks a row that does not exist yet). Once
        # more, now that its row is visible, yields the accurate refusal.
        pass
    try:
        return attempt()
    except IntegrityError:
        raise NameInUse(f"The name {handle!r} is held by a connected session.") from None


def _try_start_named(
    project_key: ProjectKey,
    workspace: Workspace,
    handle: str,
    *,
    fresh_only: bool,
    on_started: Callable[[Session], object] | None,
) -> StartedSession:
    # One transaction per claim: on SQLite the IMMEDIATE transaction
    # serialises racing starts; on PostgreSQL the row lock on the name does,
    # and the partial unique index catches whatever slips past both.
    # One cursor for the start's own statements, as a send does.
    with transaction.atomic(durable=True), connection.cursor() as cursor:
        now = timezone.now()  # read inside: BEGIN IMMEDIATE may have waited
        _lock_active_key(project_key, cursor)
        agent_name, created = _claim_name(workspace, handle, disposable=fresh_only, cursor=cursor)
        if not created and fresh_only:
            raise NameTaken()
        if agent_name.kind == AuthorKind.HUMAN:
            # people: one namespace with agents (mailbox.services.people).
            raise NameTaken(f"The name {handle!r} is a person's handle; pick another name.")
        if agent_name.workspace_id != workspace.pk:
            raise NameTaken(f"The name {handle!r} is bound to another workspace.")
        if agent_name.disposable and not fresh_only:
            # Claimed by name: someone relies on it now, so it is never freed.
            AgentName.objects.filter(pk=agent_name.pk).update(disposable=False)
            agent_name.disposable = False
        open_sessions = (
            []
            if created
            else open_sessions_of_name_locked.rows(cursor=cursor, name_id=agent_name.pk)
        )
        threshold = now - timedelta(seconds=settings.PLUMB_SESSION_TTL)
        if any(last_seen_at >= threshold for _, last_seen_at in open_sessions):
            raise NameInUse(f"The name {handle!r} is held by a connected session.")
        if open_sessions:
            sessions_end([pk for pk, _ in open_sessions], now=now, reason=Session.EndReason.EXPIRED)
        if workspace.project.max_connected_sessions:
            _check_session_cap(workspace.project, now=now)
        token = credentials.generate(credentials.SESSION_TOKEN)
        highest = _highest_note.rows(cursor=cursor)
        session = Session(
            name=agent_name,
            workspace=workspace,
            project_key=project_key,
            token_prefix=token.prefix,
            token_hash=token.digest,
            started_at=now,
            last_seen_at=now,
            notes_watermark=highest[0][0] if highest else 0,
        )
        _insert_session.insert(session, cursor=cursor)
        if on_started is not None:
            on_started(session)
        pause_point("session.started")
    session.workspace = workspace
    return StartedSession(session=session, token=token.raw)


def _check_session_cap(project: Project, *, now: datetime) -> None:
    """``too_many_sessions`` if the project has its ``max_connected_sessions`` connected.

    Racing starts of one project are ordered by its row, locked here (FOR NO
    KEY UPDATE: it blocks other starts of the project, not the inserts that
    merely refer to it), so each counts the sessions the previous one
    committed and N starts at the edge let exactly the cap through. The cap
    itself is read under that lock. On SQLite the IMMEDIATE transaction
    already runs one start at a time. Projects without a cap never get here.
    """
    cap = (
        Project.objects.select_for_update(no_key=True)
        .filter(pk=project.pk)
        .values_list("max_connected_sessions", flat=True)
        .first()
    )
    pause_point("sessions.cap_locked")
    if not cap:
        return
    connected = Session.objects.connected(now).filter(workspace__project_id=project.pk).count()
    if connected >= cap:
        metrics.CAP_REFUSALS.labels(cap="max_connected_sessions").inc()
        raise TooManySessions(max_connected_sessions=cap, connected=connected)


def _lock_active_key(project_key: ProjectKey, cursor) -> None:
    """Lock the key row until the start commits; ``key_revoked`` if it is revoked.

    Read inside the transaction, after the lock: the caller's copy of the key
    (from authentication) may predate a revocation that committed since.
    The session's foreign key alone would not do: on PostgreSQL inserting it
    takes only a KEY SHARE lock on the key row, which the revocation's
    UPDATE of ``revoked_at`` does not wait for.
    """
    rows = _key_revoked_at.rows(cursor=cursor, pk=project_key.pk)
    if rows and rows[0][0] is not None:
        raise KeyRevoked()


def _claim_name(
    workspace: Workspace, handle: str, *, disposable: bool, cursor
) -> tuple[AgentName, bool]:
    # The lock also orders a claim against names_free: a name being freed is
    # waited for, and then found gone (and created afresh) or still there.
    found = _name_locked.first(cursor=cursor, handle=handle)
    if found is not None:
        return found[""], False
    # A racing insert of the same handle fails the unique constraint; the
    # caller retries the whole start (_start_named), so no savepoint is needed.
    name = AgentName(handle=handle, workspace=workspace, disposable=disposable)
    _insert_name.insert(name, cursor=cursor)
    return name, True


def name_reserve(workspace: Workspace, handle: str, *, actor: str) -> tuple[AgentName, bool]:
    """Bind ``handle`` to ``workspace`` before any session holds it, for good.

    An operator configuring an agent (``plumb connect``) reserves its name, so
    a note to it waits for the name (``"delivery": "name"``) instead of
    ``recipient_not_found`` until the agent first connects. Returns the name
    and whether this call changed it: a new name, or a generated one of this
    workspace that is now kept (``disposable`` cleared); either is audited
    (``name.reserve``) in the same transaction. A name already kept here
    changes and records nothing. Raises ``validation_error`` (malformed or
    reserved name, or the people's workspace, where people claim their own
    handles) and ``name_taken`` (bound to another workspace, or a person's
    handle).

    Locks the name row like a session start (``_claim_name``), which orders
    it against ``names_free``: a generated name being freed is waited for,
    then found gone and created afresh. A racing insert of the same handle
    fails the unique constraint; the look is then made once more, and finds
    that row (``name_taken``, or already here).
    """
    handle = handle_check(handle)
    if workspace.project.slug == limits.PEOPLE_PROJECT:
        raise ValidationFailed.field(
            "workspace",
            "People claim their handles in the admin.",
            "No name is reserved in the people's workspace: people claim their handles "
            "in the admin.",
        )
    try:
        return _reserve(workspace, handle, actor=actor)
    except IntegrityError:
        return _reserve(workspace, handle, actor=actor)


def _reserve(workspace: Workspace, handle: str, *, actor: str) -> tuple[AgentName, bool]:
    with transaction.atomic(durable=True):
        name = (
            AgentName.objects.select_for_update()
            .select_related("workspace__project")
            .filter(handle=handle)
            .first()
        )
        if name is not None and name.kind == AuthorKind.HUMAN:
            raise NameTaken(f"The name {handle!r} is a person's handle; pick another name.")
        if name is not None and name.workspace_id != workspace.pk:
            raise NameTaken(
                f"The name {handle!r} is bound to workspace {name.workspace.slug!r} of "
                f"project {name.workspace.project.slug!r}; pick another name."
            )
        if name is not None and not name.disposable:
            return name, False
        if name is None:
            name = AgentName.objects.create(handle=handle, workspace=workspace, disposable=False)
        else:
            AgentName.objects.filter(pk=name.pk).update(disposable=False)
            name.disposable = False
        audit_record(
            actor=actor,
            action="name.reserve",
            project=workspace.project,
            target=f"name {handle} in workspace {workspace.slug}",
        )
    return name, True


def session_end(session: Session, *, actor: str = "") -> Session:
    """End a session; its token stops working. Ending twice changes nothing.

    ``actor`` (``admin:<user>``, ``cli:<user>``) names the operator who ends
    it; the end is then audited (``session.end``) in the same transaction,
    and only if this call ended it. An agent ending its own session passes
    none: that is not an operator action.
    """
    if session.ended_at is None:
        with transaction.atomic():
            ended = sessions_end([session.pk], now=timezone.now(), reason=Session.EndReason.ENDED)
            if ended and actor:
                audit_record(
                    actor=actor,
                    action="session.end",
                    project=session.workspace.project,
                    target=f"session {session.public_id} of {session.name.handle}",
                )
                # The audit trail names it now: a reader must never find that
                # handle on someone else, so it is kept like a chosen name.
                AgentName.objects.filter(pk=session.name_id).update(disposable=False)
        session.refresh_from_db(fields=["ended_at", "end_reason"])
    return session


def sessions_end(session_ids: list[int], *, now: datetime, reason: str) -> int:
    """End sessions, recording why, and let their undelivered bound notes fall back
    to the name. Returns how many were still open and are now ended.

    Two statements, in this order: the UPDATE waits for any note being bound
    to one of these sessions (``note_leave`` locks the session row), and the
    unbinding starts after it, so under READ COMMITTED it sees that note.
    """
    ended = Session.objects.filter(pk__in=session_ids, ended_at__isnull=True).update(
        ended_at=now, end_reason=reason
    )
    notes_unbind(session_ids)
    # Their waiting calls answer now, refused as a new call would be (SPEC §3.3).
    wakeups.session_waits_end(session_ids)
    return ended


def session_touch(session: Session, *, now: datetime | None = None) -> None:
    """Refresh ``last_seen_at``, writing at most once per PLUMB_SEEN_WRITE_INTERVAL.

    Every authenticated request calls this; a conditional UPDATE keeps a burst
    of requests from several processes down to one write.
    """
    now = now or timezone.now()
    threshold = now - timedelta(seconds=settings.PLUMB_SEEN_WRITE_INTERVAL)
    if session.last_seen_at > threshold:
        return
    # A woken waiting call's write joins the group commit of the requests
    # beside it (common/groupcommit.py): a message that wakes 1,000 waiting
    # calls, each quiet for longer than the interval, makes a few writes.
    if not (wake.resuming() and groupcommit.defer(sessions_touch, (session.pk, now))):
        sessions_touch([(session.pk, now)])
    session.last_seen_at = now


def sessions_touch(touches: list[tuple[int, datetime]]) -> None:
    """``last_seen_at`` of many sessions (``(pk, now)`` pairs) forward to the latest ``now``.

    One conditional UPDATE: each of them was seen at the latest of those
    times too (its request waits for this write), and a session another
    process refreshed within the interval is left as it is.
    """
    latest = max(now for _, now in touches)
    threshold = latest - timedelta(seconds=settings.PLUMB_SEEN_WRITE_INTERVAL)
    pks = sorted({pk for pk, _ in touches})
    for start in range(0, len(pks), 500):  # well under SQLite's parameter limit
        Session.objects.filter(pk__in=pks[start : start + 500], last_seen_at__lte=threshold).update(
            last_seen_at=latest
        )


# --- freeing generated names ----------------------------------------------------------

# A name is freed only once every session of it has been quiet this long
# (PLUMB_SESSION_TTL, if longer): no request authenticates as an expired
# session, and one that began before its session ended has finished by then
# (a long-poll waits 30 s at most).
_QUIET_MIN_SECONDS = 60
# How long a freed name's tokens answer session_ended rather than invalid_token
# (forgotten by the first freeing after that: a look that frees nothing writes nothing).
FREED_TOKENS_KEPT = timedelta(days=30)
# How many names one generated start frees at most: more than it takes, so
# the backlog a burst of connections leaves shrinks with every start.
NAMES_FREED_PER_START = 20


def names_free(*, now: datetime | None = None, limit: int = NAMES_FREED_PER_START) -> int:
    """Free disposable names whose sessions are over and that nothing refers to.

    A disposable name (generated; never claimed by name nor named by an
    operator's audit record) is freed once none of its sessions has been
    seen or ended for ``PLUMB_SESSION_TTL`` (a minute at least), and no row
    refers to it or to its sessions: no note sent, received or delivered, no
    thread, room, membership, event, message or mention. Its row goes with
    its sessions and their MCP session ids (which then answer
    ``invalid_token``, as unknown ones do), and the generator may draw the
    handle again. A name found holding history stays, and stops being
    disposable. Returns how many names were freed; raises no domain error.

    It runs before each generated name is drawn, which is when free names
    are needed; plumb has no background sweeper. Waiting for the sessions
    to be quiet, rather than freeing as one ends, lets the requests they had
    begun finish first: a session's own requests (a long-poll taking a
    "next" note into a thread, a join) do not lock its name.

    Locks the candidate names (in id order, so two runs cannot deadlock),
    then looks for references in a new statement. Whoever refers to a
    name that is not its own locks the name row first: a note's recipient
    (``note_leave``), a start under the name (``_claim_name``). On PostgreSQL
    such a writer that holds the lock commits first, and the look, a later
    statement under READ COMMITTED, sees its row and keeps the name; one that
    waits for the lock then finds the name gone (``recipient_not_found``, or
    a new name row for the start). On SQLite the two transactions run one
    after the other, to the same end. A reference that slipped past all this
    would fail its own commit on the foreign key; it could never pass to the
    name's next holder.
    """
    now = now or timezone.now()
    quiet_since = now - timedelta(seconds=max(settings.PLUMB_SESSION_TTL, _QUIET_MIN_SECONDS))
    candidates = list(_quiet_names(quiet_since).values_list("pk", flat=True)[:limit])
    if not candidates:
        return 0  # the usual case costs this one read, and no write
    with transaction.atomic(durable=True):
        locked = list(
            AgentName.objects.select_for_update()
            .filter(pk__in=candidates)
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        looked = list(
            _quiet_names(quiet_since)
            .filter(pk__in=locked)
            .annotate(held=_holds_history())
            .values_list("pk", "held")
        )
        held = [pk for pk, holds in looked if holds]
        free = [pk for pk, holds in looked if not holds]
        if held:
            # For good: history is never deleted, so there is no need to look again.
            AgentName.objects.filter(pk__in=held).update(disposable=False)
        pause_point("names.checked")
        if free:
            # Their tokens are remembered as tokens that existed (FreedToken).
            FreedToken.objects.bulk_create(
                [
                    FreedToken(token_prefix=prefix, token_hash=digest, freed_at=now)
                    for prefix, digest in Session.objects.filter(name__in=free).values_list(
                        "token_prefix", "token_hash"
                    )
                ],
                ignore_conflicts=True,
            )
            # Its sessions and their MCP session ids go with it (CASCADE); the
            # look above found nothing else that the deletion would touch.
            AgentName.objects.filter(pk__in=free).delete()
        FreedToken.objects.filter(freed_at__lt=now - FREED_TOKENS_KEPT).delete()
    return len(free)


def _quiet_names(quiet_since: datetime) -> models.QuerySet[AgentName]:
    """Disposable names none of whose sessions was seen or ended since ``quiet_since``.

    An open session last seen before then has expired (``quiet_since`` is at
    least ``PLUMB_SESSION_TTL`` ago), so it counts as over too.
    """
    recent = Session.objects.filter(name=OuterRef("pk")).filter(
        Q(last_seen_at__gte=quiet_since) | Q(ended_at__gte=quiet_since)
    )
    return AgentName.objects.filter(disposable=True).exclude(Exists(recent))


# A name's own sessions, and their MCP session ids, go with it: they are not history.
_OWN_ROWS = (Session, McpSession)


def _holds_history() -> Q:
    """Whether any row refers to the outer name, or to one of its sessions,
    besides its own sessions and their MCP session ids.

    Read from the model graph rather than listed, because ``mailbox`` may
    not import ``rooms`` (memberships, events, messages, mentions, rooms
    created) and because a table added later must count without anyone
    remembering this rule. Every such foreign key is indexed, so each test
    is an index probe.
    """
    tests = [
        Exists(model._base_manager.filter(**{field: OuterRef("pk")}))
        for model, field in _references_to(AgentName)
    ] + [
        Exists(model._base_manager.filter(**{f"{field}__name": OuterRef("pk")}))
        for model, field in _references_to(Session)
    ]
    return functools.reduce(operator.or_, tests)


def _references_to(target: type[models.Model]) -> list[tuple[type[models.Model], str]]:
    """(model, field) for every foreign key to ``target``, bar those of the name's own rows;
    the relations a deletion of ``target`` rows would follow."""
    return [
        (relation.related_model, relation.field.name)
        for relation in target._meta.get_fields(include_hidden=True)
        if relation.auto_created
        and not relation.concrete
        and (relation.one_to_many or relation.one_to_one)
        and relation.related_model not in _OWN_ROWS
    ]
