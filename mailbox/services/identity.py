"""State changes of projects, workspaces and cross-project opt-ins, and the text rules they share.

Keys are in ``keys``, sessions and names in ``sessions``, the first start in
``bootstrap``. The REST API, the admin and the ``plumb`` command all call
these functions; none of them writes these tables directly.
"""

from __future__ import annotations

import re

from django.db import IntegrityError, transaction

from common import limits
from common.errors import ValidationFailed
from mailbox.errors import AlreadyExists, OptInNotFound
from mailbox.models import NOTE_TTL_DEFAULT, CrossProjectOptIn, Project, Workspace
from mailbox.services.audit import audit_record
from mailbox.signals import optin_revoked

_SLUG_RE = re.compile(limits.SLUG_PATTERN)


def slug_check(value: str, *, field: str = "slug") -> str:
    """Slugs of projects, workspaces and rooms; raises ``validation_error``."""
    if not isinstance(value, str) or not _SLUG_RE.match(value):
        raise ValidationFailed.field(field, limits.SLUG_MESSAGE)
    return value


# --- projects -----------------------------------------------------------------


def project_create(
    slug: str,
    *,
    name: str = "",
    max_exchanges: int = 20,
    mailbox_enabled: bool = True,
    accept_all_projects: bool = False,
    note_ttl: int = NOTE_TTL_DEFAULT,
    **policy: int,
) -> Project:
    """Create a project. Raises ``validation_error`` or ``already_exists``.

    ``policy``: any of ``POLICY_SETTINGS`` (budgets, caps, retention), each
    checked against its range; the rest keep their defaults.
    """
    slug_check(slug)
    text_check(name, field="name", limit=limits.PROJECT_NAME_MAX)
    _check_max_exchanges(max_exchanges)
    _check_note_ttl(note_ttl)
    for field, value in policy.items():
        policy_check(field, value)
    try:
        # The savepoint keeps a caller's outer transaction usable after a clash.
        with transaction.atomic():
            return Project.objects.create(
                slug=slug,
                name=name or slug,
                max_exchanges=max_exchanges,
                mailbox_enabled=mailbox_enabled,
                accept_all_projects=accept_all_projects,
                note_ttl=note_ttl,
                **policy,
            )
    except IntegrityError:
        raise AlreadyExists(f"Project {slug!r} already exists.") from None


# The audit action of each setting project_update changes.
_PROJECT_SETTING_ACTIONS = {
    "name": "project.name",
    "mailbox_enabled": "project.mailbox",
    "max_exchanges": "project.max_exchanges",
    "accept_all_projects": "project.accept_all_projects",
    "note_ttl": "project.note_ttl",
    "daily_note_budget": "project.daily_note_budget",
    "daily_message_budget": "project.daily_message_budget",
    "room_flood_limit": "project.room_flood_limit",
    "max_connected_sessions": "project.max_connected_sessions",
    "retention_days": "project.retention_days",
}

# The operator policy of SPEC §8 besides note_ttl: each a whole number from 0
# ("none") to its limit. The limits only keep arithmetic and clients sane.
POLICY_SETTINGS: dict[str, int] = {
    "daily_note_budget": 10_000_000,
    "daily_message_budget": 10_000_000,
    "room_flood_limit": 100_000,
    "max_connected_sessions": 1_000_000,
    "retention_days": 36_500,
}


def policy_check(field: str, value: object) -> int:
    """One policy setting's value; ``validation_error`` outside 0 … its limit."""
    if field not in POLICY_SETTINGS:
        raise TypeError(f"{field!r} is not a policy setting")
    limit = POLICY_SETTINGS[field]
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= limit:
        raise ValidationFailed.field(
            field,
            f"Must be from 0 to {limit}.",
            f"{field} must be a whole number from 0 (none) to {limit}.",
        )
    return value


def project_update(
    project: Project,
    *,
    actor: str,
    name: str | None = None,
    max_exchanges: int | None = None,
    mailbox_enabled: bool | None = None,
    accept_all_projects: bool | None = None,
    note_ttl: int | None = None,
    **policy: int | None,
) -> Project:
    """Change a project's name, collab settings, note TTL or policy; raises ``validation_error``.

    ``policy``: any of ``POLICY_SETTINGS``; a new budget or cap bites at the
    next write it counts, a new retention at the next purge.

    ``accept_all_projects`` is an opt-in to every project and the mailbox
    switch decides whether the project's sessions may talk at all, so each
    setting that changes leaves one audit record (``old → new``, by ``actor``)
    in the transaction that changes it (SPEC §5); a setting given its current
    value changes and records nothing. Conversations keep the cap they were
    created with; a new ``note_ttl`` applies to every waiting note of the
    project's agents from the next bounce run on.

    The old values come from the row, locked, not from ``project``: the admin
    passes an instance its form has already changed, and two updates racing
    must each record what they actually replaced.
    """
    wanted: dict[str, object] = {}
    if name is not None:
        wanted["name"] = (
            text_check(name, field="name", limit=limits.PROJECT_NAME_MAX) or project.slug
        )
    if max_exchanges is not None:
        _check_max_exchanges(max_exchanges)
        wanted["max_exchanges"] = max_exchanges
    if mailbox_enabled is not None:
        wanted["mailbox_enabled"] = bool(mailbox_enabled)
    if accept_all_projects is not None:
        wanted["accept_all_projects"] = bool(accept_all_projects)
    if note_ttl is not None:
        _check_note_ttl(note_ttl)
        wanted["note_ttl"] = note_ttl
    for field, value in policy.items():
        if value is not None:
            wanted[field] = policy_check(field, value)
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
        raise ValidationFailed.field(
            "max_exchanges",
            f"Must be from 1 to {MAX_EXCHANGES_LIMIT}.",
            f"max_exchanges must be a whole number from 1 to {MAX_EXCHANGES_LIMIT}.",
        )


# Ten years: a longer TTL is no TTL, and the arithmetic stays far from overflow.
NOTE_TTL_LIMIT = 10 * 365 * 24 * 3600


def _check_note_ttl(value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= NOTE_TTL_LIMIT:
        raise ValidationFailed.field(
            "note_ttl",
            f"Must be from 1 to {NOTE_TTL_LIMIT} seconds.",
            f"note_ttl must be a whole number of seconds from 1 to {NOTE_TTL_LIMIT}.",
        )


def text_check(value: str, *, field: str, limit: int) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise ValidationFailed.field(
            field,
            f"At most {limit} characters.",
            f"{field} must be text of at most {limit} characters.",
        )
    return value


# --- workspaces -----------------------------------------------------------------


def workspace_create(project: Project, *, slug: str) -> Workspace:
    """Create a workspace in a project. Raises ``validation_error`` or ``already_exists``."""
    slug_check(slug)
    try:
        with transaction.atomic():
            return Workspace.objects.create(project=project, slug=slug)
    except IntegrityError:
        raise AlreadyExists(f"Workspace {project.slug}/{slug} already exists.") from None


# --- cross-project opt-ins -------------------------------------------------------


def optin_grant(
    project: Project, *, source: Project, created_by: str, note: str = ""
) -> CrossProjectOptIn:
    """``project`` starts accepting notes and room joins from ``source``.

    Raises ``validation_error`` (a project and itself) and ``already_exists``.
    """
    text_check(note, field="note", limit=limits.OPTIN_NOTE_MAX)
    created_by = created_by[:150]
    if project.pk == source.pk:
        raise ValidationFailed.field(
            "source", "Must be another project.", "A project always accepts its own traffic."
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
