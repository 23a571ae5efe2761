"""Sessions and the names they hold: start, end, touch; generated and reserved names.

A session is one connection of an agent under a name in a workspace, with
a bearer token of its own, started with a project key that it records.

Generated names come from a space that cannot run out: ``adjective-animal-NN``
while those last, then the same with 4, 6, 8... digits.
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
from django.db.models import Max
from django.utils import timezone

from common import limits
from common.pause import pause_point
from mailbox import credentials
from mailbox.errors import InvalidName, KeyRevoked, NameInUse, NameTaken, WorkspaceNotFound
from mailbox.models import AgentName, Note, ProjectKey, Session, Workspace
from mailbox.services.audit import audit_record
from mailbox.services.notes import notes_unbind

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
            sessions_end([s.pk for s in open_sessions], now=now, reason=Session.EndReason.EXPIRED)
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
            ended = sessions_end([session.pk], now=timezone.now(), reason=Session.EndReason.ENDED)
            if ended and actor:
                audit_record(
                    actor=actor,
                    action="session.end",
                    project=session.workspace.project,
                    target=f"session {session.public_id} of {session.name.handle}",
                )
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
