"""State changes of the identity layer: projects, keys, opt-ins, workspaces, sessions.

The REST API, the admin and the ``plumb`` management command all call these
functions; none of them writes these tables directly.
"""

from __future__ import annotations

import functools
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max, Q
from django.utils import timezone

from common import limits
from common.errors import ValidationFailed
from common.pause import pause_point
from mailbox import credentials
from mailbox.errors import (
    AlreadyExists,
    InvalidName,
    KeyNotFound,
    KeyRevoked,
    NameInUse,
    NameTaken,
    OptInNotFound,
    ProjectNotFound,
    WorkspaceNotFound,
)
from mailbox.models import (
    AgentName,
    CrossProjectOptIn,
    Note,
    Project,
    ProjectKey,
    Session,
    Workspace,
)
from mailbox.services.audit import audit_record
from mailbox.services.notes import notes_unbind
from mailbox.signals import optin_revoked

_SLUG_RE = re.compile(limits.SLUG_PATTERN)
_HANDLE_RE = re.compile(limits.HANDLE_PATTERN)


def slug_check(value: str, *, field: str = "slug") -> str:
    """Slugs of projects, workspaces and rooms; raises ``validation_error``."""
    if not isinstance(value, str) or not _SLUG_RE.match(value):
        raise ValidationFailed(
            f"{field}: {limits.SLUG_MESSAGE}",
            details={field: [limits.SLUG_MESSAGE]},
        )
    return value


# --- projects -----------------------------------------------------------------


def project_create(
    slug: str,
    *,
    name: str = "",
    max_exchanges: int = 20,
    mailbox_enabled: bool = True,
    accept_all_projects: bool = False,
) -> Project:
    """Create a project. Raises ``validation_error`` or ``already_exists``."""
    slug_check(slug)
    _check_text(name, field="name", limit=limits.PROJECT_NAME_MAX)
    _check_max_exchanges(max_exchanges)
    try:
        # The savepoint keeps a caller's outer transaction usable after a clash.
        with transaction.atomic():
            return Project.objects.create(
                slug=slug,
                name=name or slug,
                max_exchanges=max_exchanges,
                mailbox_enabled=mailbox_enabled,
                accept_all_projects=accept_all_projects,
            )
    except IntegrityError:
        raise AlreadyExists(f"Project {slug!r} already exists.") from None


# The audit action of each setting project_update changes.
_PROJECT_SETTING_ACTIONS = {
    "name": "project.name",
    "mailbox_enabled": "project.mailbox",
    "max_exchanges": "project.max_exchanges",
    "accept_all_projects": "project.accept_all_projects",
}


def project_update(
    project: Project,
    *,
    actor: str,
    name: str | None = None,
    max_exchanges: int | None = None,
    mailbox_enabled: bool | None = None,
    accept_all_projects: bool | None = None,
) -> Project:
    """Change a project's name or collab settings; raises ``validation_error``.

    ``accept_all_projects`` is an opt-in to every project and the mailbox
    switch decides whether the project's sessions may talk at all, so each
    setting that changes leaves one audit record (``old → new``, by ``actor``)
    in the transaction that changes it (SPEC §5); a setting given its current
    value changes and records nothing. Conversations keep the cap they were
    created with.

    The old values come from the row, locked, not from ``project``: the admin
    passes an instance its form has already changed, and two updates racing
    must each record what they actually replaced.
    """
    wanted: dict[str, object] = {}
    if name is not None:
        wanted["name"] = (
            _check_text(name, field="name", limit=limits.PROJECT_NAME_MAX) or project.slug
        )
    if max_exchanges is not None:
        _check_max_exchanges(max_exchanges)
        wanted["max_exchanges"] = max_exchanges
    if mailbox_enabled is not None:
        wanted["mailbox_enabled"] = bool(mailbox_enabled)
    if accept_all_projects is not None:
        wanted["accept_all_projects"] = bool(accept_all_projects)
    with transaction.atomic():
        # The row lock (on SQLite, the IMMEDIATE transaction's write lock) orders
        # racing updates: each reads the value the previous one committed.
        current = Project.objects.select_for_update().get(pk=project.pk)
        changed = {
            field: value for field, value in wanted.items() if getattr(current, field) != value
        }
        if changed:
            Project.objects.filter(pk=current.pk).update(**changed)
        for field, value in changed.items():
            audit_record(
                actor=actor,
                action=_PROJECT_SETTING_ACTIONS[field],
                project=current,
                target=f"{_setting_text(getattr(current, field))} → {_setting_text(value)}",
            )
        if changed.get("accept_all_projects") is False:
            # Like revoking an opt-in from every project at once: agents of
            # projects it does not opt in to leave its rooms (SPEC §5).
            current.accept_all_projects = False
            optin_revoked.send(sender=Project, project=current, source=None, actor=actor)
    for field in _PROJECT_SETTING_ACTIONS:
        setattr(project, field, changed.get(field, getattr(current, field)))
    return project


def _setting_text(value: object) -> str:
    """A setting as the audit trail shows it: on/off, a number, a quoted name."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return repr(value) if isinstance(value, str) else str(value)


MAX_EXCHANGES_LIMIT = 100_000


def _check_max_exchanges(value: int) -> None:
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or not 1 <= value <= MAX_EXCHANGES_LIMIT
    ):
        raise ValidationFailed(
            f"max_exchanges must be a whole number from 1 to {MAX_EXCHANGES_LIMIT}.",
            details={"max_exchanges": [f"Must be from 1 to {MAX_EXCHANGES_LIMIT}."]},
        )


def _check_text(value: str, *, field: str, limit: int) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise ValidationFailed(
            f"{field} must be text of at most {limit} characters.",
            details={field: [f"At most {limit} characters."]},
        )
    return value


def project_get(slug: str) -> Project:
    """The project with this slug; raises ``project_not_found``."""
    try:
        return Project.objects.get(slug=slug)
    except Project.DoesNotExist:
        raise ProjectNotFound(f"No project {slug!r}.") from None


# --- workspaces -----------------------------------------------------------------


def workspace_create(project: Project, *, slug: str) -> Workspace:
    """Create a workspace in a project. Raises ``validation_error`` or ``already_exists``."""
    slug_check(slug)
    try:
        with transaction.atomic():
            return Workspace.objects.create(project=project, slug=slug)
    except IntegrityError:
        raise AlreadyExists(f"Workspace {project.slug}/{slug} already exists.") from None


# --- project keys ---------------------------------------------------------------


@dataclass(frozen=True)
class IssuedKey:
    key: ProjectKey
    raw: str  # shown once; never stored


def key_create(project: Project, *, label: str = "", created_by: str = "") -> IssuedKey:
    """Issue a project key; raises ``validation_error`` for an over-long label.

    Only its digest and public prefix are stored.
    """
    _check_text(label, field="label", limit=limits.KEY_LABEL_MAX)
    created_by = created_by[:150]
    for _ in range(5):
        new = credentials.generate(credentials.PROJECT_KEY)
        try:
            with transaction.atomic():
                key = ProjectKey.objects.create(
                    project=project,
                    prefix=new.prefix,
                    key_hash=new.digest,
                    label=label,
                    created_by=created_by,
                )
                audit_record(
                    actor=created_by,
                    action="key.create",
                    project=project,
                    target=key.display_prefix,
                    reason=label,
                )
        except IntegrityError:
            continue  # prefix collision (1 in ~10^12): draw again
        return IssuedKey(key=key, raw=new.raw)
    raise RuntimeError("Could not draw a unique key prefix.")


def key_find(prefix_or_key: str) -> ProjectKey:
    """Find a key by its prefix (``abcd1234`` or ``plumb_key_abcd1234``) or the whole key.

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


def key_revoke(key: ProjectKey, *, actor: str, reason: str = "") -> int:
    """Revoke a key and end every open session it started; returns how many it ended.

    The key stops starting sessions (``401 key_revoked``), the tokens of the
    sessions it started answer ``401 key_revoked`` from the moment this
    commits, and their undelivered bound notes fall back to their names
    (``_sessions_end``). One transaction, with one audit record that says how
    many sessions ended. ``key`` is refreshed (``revoked_at``). Revoking a
    revoked key changes nothing, records nothing and returns 0.

    Race with ``session_start`` (a session started with this key while it is
    being revoked must not stay open): the UPDATE below takes the key row's
    lock first, and ``session_start`` locks the same row and checks
    ``revoked_at`` inside its own transaction. On PostgreSQL (READ COMMITTED)
    either the start holds the lock and this UPDATE waits until the start
    commits, after which the ending statement (a new statement, so a fresh
    snapshot) sees the new session and ends it; or this UPDATE holds it, and
    the start waits and then reads the revoked row and refuses. On SQLite
    the two IMMEDIATE transactions run one after the other, to the same end.
    Locks the key row, then the sessions' rows: the order ``session_start``
    takes them in, so the two cannot deadlock. Durable: its callers (the
    admin action, the command) never wrap it, and a wrapping transaction
    would hold the key lock, and with it every start with this key, for work
    this function cannot see.
    """
    with transaction.atomic(durable=True):
        now = timezone.now()
        revoked = ProjectKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(
            revoked_at=now
        )
        ended = 0
        if revoked:
            pause_point("key.revoked")
            open_ids = list(
                Session.objects.filter(project_key=key, ended_at__isnull=True).values_list(
                    "pk", flat=True
                )
            )
            ended = _sessions_end(open_ids, now=now, reason=Session.EndReason.KEY_REVOKED)
            audit_record(
                actor=actor,
                action="key.revoke",
                project=key.project,
                target=f"{key.display_prefix} ({ended} session(s) ended)",
                reason=reason,
            )
    key.refresh_from_db(fields=["revoked_at"])
    return ended


# --- cross-project opt-ins -------------------------------------------------------


def optin_grant(
    project: Project, *, source: Project, created_by: str, note: str = ""
) -> CrossProjectOptIn:
    """``project`` starts accepting notes and room joins from ``source``.

    Raises ``validation_error`` (a project and itself) and ``already_exists``.
    """
    _check_text(note, field="note", limit=limits.OPTIN_NOTE_MAX)
    created_by = created_by[:150]
    if project.pk == source.pk:
        raise ValidationFailed(
            "A project always accepts its own traffic.",
            details={"source": ["Must be another project."]},
        )
    try:
        with transaction.atomic():
            optin = CrossProjectOptIn.objects.create(
                project=project, source=source, created_by=created_by, note=note
            )
            audit_record(
                actor=created_by,
                action="optin.grant",
                project=project,
                target=f"{project.slug} accepts {source.slug}",
                reason=note,
            )
            return optin
    except IntegrityError:
        raise AlreadyExists(f"{project.slug} already accepts {source.slug}.") from None


def optin_revoke(project: Project, *, source: Project, actor: str, reason: str = "") -> None:
    """``project`` stops accepting ``source``; raises ``optin_not_found``.

    Threads already started keep working where their participants have
    written (SPEC §3.2); new threads and joins are refused from now on. Unless
    ``project`` still accepts every project (``accept_all_projects``),
    ``source``'s agents leave every room of ``project`` they were in, in this
    same transaction: the ``optin_revoked`` signal (``mailbox.signals``)
    announces the revocation and ``rooms`` reacts (a lower floor may not
    import the upper one). The rooms side locks every room of ``project``
    before it looks for members, which closes the race with a join (see
    ``rooms.services.members_remove_for_revoked_optin``).

    Turning ``accept_all_projects`` off (``project_update``) is the same
    revocation for every project without an opt-in: the signal goes out with
    ``source=None``.

    Not durable: the admin revokes inside its own save transaction
    (``changeform_view``, ``delete_view``).
    """
    with transaction.atomic():
        deleted, _ = CrossProjectOptIn.objects.filter(project=project, source=source).delete()
        if not deleted:
            raise OptInNotFound(f"{project.slug} has no opt-in for {source.slug}.")
        audit_record(
            actor=actor,
            action="optin.revoke",
            project=project,
            target=f"{project.slug} accepts {source.slug}",
            reason=reason,
        )
        # Inside the transaction: the removals commit or roll back with it.
        optin_revoked.send(sender=CrossProjectOptIn, project=project, source=source, actor=actor)


# --- bootstrap ------------------------------------------------------------------------

DEFAULT_SLUG = "default"


@dataclass(frozen=True)
class Bootstrapped:
    project: Project
    workspace: Workspace
    project_created: bool
    workspace_created: bool
    issued: IssuedKey | None  # a key only when the project was created just now


def site_bootstrap(*, created_by: str) -> Bootstrapped:
    """Make sure the ``default`` project and workspace exist (``make serve``).

    One transaction: a key is issued only together with the project it belongs
    to, so a failure half-way cannot leave a project whose key was never shown.
    Two bootstraps racing serialise on SQLite's write lock or PostgreSQL's
    unique index; the loser finds the winner's project and issues no key.
    """
    with transaction.atomic():
        try:
            project, project_created = project_create(DEFAULT_SLUG, name="Default"), True
        except AlreadyExists:
            project, project_created = project_get(DEFAULT_SLUG), False
        try:
            workspace, workspace_created = workspace_create(project, slug=DEFAULT_SLUG), True
        except AlreadyExists:
            workspace = Workspace.objects.get(project=project, slug=DEFAULT_SLUG)
            workspace_created = False
        issued = (
            key_create(project, label="bootstrap", created_by=created_by)
            if project_created
            else None
        )
    return Bootstrapped(project, workspace, project_created, workspace_created, issued)


# --- sessions ------------------------------------------------------------------------

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


def _generated_handle() -> str:
    """A readable name; never a reserved one, which no session may hold."""
    while True:
        handle = (
            f"{secrets.choice(_ADJECTIVES)}-{secrets.choice(_ANIMALS)}-{secrets.randbelow(90) + 10}"
        )
        if handle not in limits.RESERVED_NAMES:
            return handle


def handle_check(name: object, *, field: str = "name") -> str:
    """A name a session may claim; raises ``validation_error`` under ``field``.

    Every door that claims a name (REST and MCP session starts, the MCP
    ``Plumb-Name`` header, the admin) checks it here, so ``next`` is refused
    everywhere alike.
    """
    if not isinstance(name, str) or not _HANDLE_RE.match(name):
        raise InvalidName(
            f"{field}: {limits.HANDLE_MESSAGE}",
            details={field: [limits.HANDLE_MESSAGE]},
        )
    if name in limits.RESERVED_NAMES:
        raise InvalidName(
            f"{field}: {limits.RESERVED_NAME_MESSAGE}",
            details={field: [limits.RESERVED_NAME_MESSAGE]},
        )
    return name


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

    Raises ``workspace_not_found``, ``validation_error`` (malformed or reserved name),
    ``name_taken`` (bound to another workspace), ``name_in_use`` (held by a
    connected session) and ``key_revoked`` (``project_key`` was revoked, even
    after the caller's authentication read it). Stale sessions of the name
    are ended here, so that the partial unique index on open sessions stays
    satisfiable.

    Locks the key row, then the name row, then the name's open sessions.
    The key lock is what orders a start against ``key_revoke`` (see there):
    the start either commits before the revocation's ending statement runs,
    and is ended by it, or reads the revoked key and refuses. Starts with one
    key therefore queue on PostgreSQL for the few milliseconds of each
    other's transaction (the per-key rate limit bounds how many there are).
    Each attempt is a transaction of its own, which no caller may wrap; a
    caller that must write beside the new session, all or nothing, passes
    ``on_started``, which runs inside that transaction.
    """
    workspace = (
        Workspace.objects.select_related("project")
        .filter(project_id=project_key.project_id, slug=workspace_slug)
        .first()
    )
    if workspace is None:
        raise WorkspaceNotFound(f"No workspace {workspace_slug!r} in this project.")
    if name is not None:
        return _start_named(project_key, workspace, handle_check(name), on_started=on_started)
    # A generated name only needs to be free; on the rare clash draw another.
    for _ in range(20):
        try:
            return _start_named(
                project_key, workspace, _generated_handle(), fresh_only=True, on_started=on_started
            )
        except (NameInUse, NameTaken):
            continue
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
    with transaction.atomic(durable=True):
        now = timezone.now()  # read inside: BEGIN IMMEDIATE may have waited
        _lock_active_key(project_key)
        agent_name, created = _claim_name(workspace, handle)
        if not created and fresh_only:
            raise NameTaken()
        if agent_name.workspace_id != workspace.pk:
            raise NameTaken(f"The name {handle!r} is bound to another workspace.")
        open_sessions = list(
            Session.objects.select_for_update().filter(name=agent_name, ended_at__isnull=True)
        )
        if any(s.is_connected(now) for s in open_sessions):
            raise NameInUse(f"The name {handle!r} is held by a connected session.")
        if open_sessions:
            _sessions_end([s.pk for s in open_sessions], now=now, reason=Session.EndReason.EXPIRED)
        token = credentials.generate(credentials.SESSION_TOKEN)
        watermark = Note.objects.aggregate(highest=Max("id"))["highest"] or 0
        session = Session.objects.create(
            name=agent_name,
            workspace=workspace,
            project_key=project_key,
            token_prefix=token.prefix,
            token_hash=token.digest,
            started_at=now,
            last_seen_at=now,
            notes_watermark=watermark,
        )
        if on_started is not None:
            on_started(session)
        pause_point("session.started")
    session.workspace = workspace
    return StartedSession(session=session, token=token.raw)


def _lock_active_key(project_key: ProjectKey) -> None:
    """Lock the key row until the start commits; ``key_revoked`` if it is revoked.

    Read inside the transaction, after the lock: the caller's copy of the key
    (from authentication) may predate a revocation that committed since.
    The session's foreign key alone would not do: on PostgreSQL inserting it
    takes only a KEY SHARE lock on the key row, which the revocation's
    UPDATE of ``revoked_at`` does not wait for.
    """
    revoked_at = (
        ProjectKey.objects.select_for_update()
        .filter(pk=project_key.pk)
        .values_list("revoked_at", flat=True)
        .first()
    )
    if revoked_at is not None:
        raise KeyRevoked()


def _claim_name(workspace: Workspace, handle: str) -> tuple[AgentName, bool]:
    existing = AgentName.objects.select_for_update().filter(handle=handle).first()
    if existing is not None:
        return existing, False
    with transaction.atomic():
        return AgentName.objects.create(handle=handle, workspace=workspace), True


def session_end(session: Session, *, actor: str = "") -> Session:
    """End a session; its token stops working. Ending twice changes nothing.

    ``actor`` (``admin:<user>``, ``cli:<user>``) names the operator who ends
    it; the end is then audited (``session.end``) in the same transaction,
    and only if this call ended it. An agent ending its own session passes
    none: that is not an operator action.
    """
    if session.ended_at is None:
        with transaction.atomic():
            ended = _sessions_end([session.pk], now=timezone.now(), reason=Session.EndReason.ENDED)
            if ended and actor:
                audit_record(
                    actor=actor,
                    action="session.end",
                    project=session.workspace.project,
                    target=f"session {session.public_id} of {session.name.handle}",
                )
        session.refresh_from_db(fields=["ended_at", "end_reason"])
    return session


def _sessions_end(session_ids: list[int], *, now: datetime, reason: str) -> int:
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
    Session.objects.filter(pk=session.pk, last_seen_at__lte=threshold).update(last_seen_at=now)
    session.last_seen_at = now


def key_touch(key: ProjectKey, *, now: datetime | None = None) -> None:
    """Record that a key was used, at most once a minute per key."""
    now = now or timezone.now()
    threshold = now - timedelta(seconds=60)
    if key.last_used_at is not None and key.last_used_at > threshold:
        return
    ProjectKey.objects.filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lte=threshold), pk=key.pk
    ).update(last_used_at=now)
    key.last_used_at = now
