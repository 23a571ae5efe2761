"""Project keys: issued once in clear, stored as a digest, revoked for good.

Revoking a key ends every session it started (SPEC §5), so this module
builds on ``sessions``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from common import limits
from common.errors import ValidationFailed
from common.pause import pause_point
from mailbox import credentials
from mailbox.models import Project, ProjectKey, Session
from mailbox.services.audit import audit_record
from mailbox.services.identity import text_check
from mailbox.services.sessions import sessions_end


@dataclass(frozen=True)
class IssuedKey:
    key: ProjectKey
    raw: str  # shown once; never stored


def key_create(project: Project, *, label: str = "", created_by: str = "") -> IssuedKey:
    """Issue a project key; raises ``validation_error`` for an over-long label, and
    for the people's project (people act from the admin, with no key).

    Only its digest and public prefix are stored.
    """
    text_check(label, field="label", limit=limits.KEY_LABEL_MAX)
    if project.slug == limits.PEOPLE_PROJECT:
        raise ValidationFailed.field(
            "project",
            "People act from the admin; no key is issued for their project.",
        )
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


def key_revoke(key: ProjectKey, *, actor: str, reason: str = "") -> int:
    """Revoke a key and end every open session it started; returns how many it ended.

    The key stops starting sessions (``401 key_revoked``), the tokens of the
    sessions it started answer ``401 key_revoked`` from the moment this
    commits, and their undelivered bound notes fall back to their names
    (``sessions_end``). One transaction, with one audit record that says how
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
            ended = sessions_end(open_ids, now=now, reason=Session.EndReason.KEY_REVOKED)
            audit_record(
                actor=actor,
                action="key.revoke",
                project=key.project,
                target=f"{key.display_prefix} ({ended} session(s) ended)",
                reason=reason,
            )
    key.refresh_from_db(fields=["revoked_at"])
    return ended


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
