"""The retention purge (SPEC §8): what is older than a project's ``retention_days`` goes.

Run hourly by the server (``plumb_site/jobs.py``, one runner at a time across
processes and hosts) and on demand by ``plumb purge``. For each project with
a retention, in this order:

1. its agents' notes still waiting that were sent before the cutoff bounce
   (``notes_bounce_sent_before``): a note is never deleted undelivered;
2. each of its rooms loses the events older than the cutoff, as a prefix of
   its stream: from ``history_starts_at`` up to the first event it keeps.
   Messages go with their events (mentions with them), except a message
   that a kept event still points at (a review, a moderation notice): that
   one stays until they go. ``head_seq`` never moves back, so seqs are
   never reused, and ``history_starts_at`` becomes the first kept seq, which
   reads from below it report (SPEC §4.3);
3. its notes settled before the cutoff, and conversations left empty
   (``mailbox.services.retention``);
4. one audit record (``project.purge``) with the counts, if anything went.

**Beside traffic.** Each batch is a short transaction of its own: at most
``PURGE_BATCH`` events of one room, under that room's lock (so no send,
review or moderation of the room interleaves with it), deleted by plain
statements (no model instances), or ``PURGE_BATCH`` notes; between two
batches of a room the purge steps aside for ``PURGE_PAUSE``. A send waits
for at most one batch: beside a purge of 10^5 events its p99 stays under
100 ms (``tests/scale/test_policy_at_scale.py`` prints the figures). Idempotent: a
purge run twice, or by two processes at once, deletes each row once.

**Unseen counts.** A member whose read position is below the purged
history counts the purged messages of others as unseen (counts come from
message ordinals, which the purge leaves as they are) until its next read,
which starts at the first kept event.

A full-text index over messages follows these deletions where
``_purge_room_batch`` deletes events and messages.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, fields
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from common import metrics
from common.pause import pause_point
from mailbox.models import Project
from mailbox.services.audit import audit_record
from mailbox.services.bounces import notes_bounce_sent_before
from mailbox.services.budgets import budget_day, usage_forget
from mailbox.services.retention import notes_purge
from rooms.models import Event, Message, MessageMention, Room
from rooms.services.flood import PLUMB_ACTOR
from rooms.services.stream import lock_room

PURGE_BATCH = 100
# Between two batches the purge steps aside this long, so that writers queued behind a
# batch (on SQLite, every writer) get their turn before the next one.
PURGE_PAUSE = 0.005


@dataclass
class Purged:
    """What one project's purge did."""

    events: int = 0
    messages: int = 0
    notes: int = 0
    conversations: int = 0
    bounced: int = 0

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))

    def text(self) -> str:
        return (
            f"{self.events} events, {self.messages} messages, {self.notes} notes, "
            f"{self.conversations} conversations deleted; {self.bounced} notes bounced"
        )


def purge_run(
    project: Project | None = None,
    *,
    actor: str = PLUMB_ACTOR,
    now: datetime | None = None,
    batch: int = PURGE_BATCH,
) -> dict[str, Purged]:
    """Purge every project with a retention (or only ``project``); what each purge did, by slug.

    A project whose ``retention_days`` is 0 keeps everything and is left out.
    Raises no domain error.
    """
    now = now or timezone.now()
    projects = Project.objects.filter(retention_days__gt=0).order_by("slug")
    if project is not None:
        projects = projects.filter(pk=project.pk)
    done = {}
    for each in projects:
        done[each.slug] = _purge_project(each, now=now, actor=actor, batch=batch)
    # Only today's counters are read; yesterday's stays for a late reader.
    usage_forget(before=budget_day(now) - timedelta(days=1))
    return done


def _purge_project(project: Project, *, now: datetime, actor: str, batch: int) -> Purged:
    cutoff = now - timedelta(days=project.retention_days)
    purged = Purged()
    purged.bounced = notes_bounce_sent_before(project, cutoff, now=now)
    for slug in Room.objects.filter(project=project).order_by("pk").values_list("slug", flat=True):
        while True:
            events, messages, more = _purge_room_batch(slug, cutoff, batch)
            purged.events += events
            purged.messages += messages
            if not more:
                break
            time.sleep(PURGE_PAUSE)
    purged.notes, purged.conversations = notes_purge(project, cutoff, batch=batch)
    if purged:
        for what in ("events", "messages", "notes", "conversations"):
            metrics.PURGED_ROWS.labels(what=what).inc(getattr(purged, what))
        audit_record(
            actor=actor,
            action="project.purge",
            project=project,
            target=purged.text(),
            reason=f"retention_days {project.retention_days}: "
            f"older than {cutoff:%Y-%m-%d %H:%M} UTC",
        )
    return purged


def _purge_room_batch(slug: str, cutoff: datetime, batch: int) -> tuple[int, int, bool]:
    """Delete up to ``batch`` of the room's oldest events older than ``cutoff``.

    Returns (events, messages) deleted and whether more may be due.
    """
    with transaction.atomic(durable=True):
        room = lock_room(slug)
        pause_point("purge.room_locked")
        # A prefix of the stream: stop at the first event to keep, whatever follows.
        head = list(
            Event.objects.filter(room=room, seq__gte=room.history_starts_at)
            .order_by("seq")
            .values_list("seq", "created_at")[:batch]
        )
        upto = None
        for seq, created_at in head:
            if created_at >= cutoff:
                break
            upto = seq
        if upto is None:
            return 0, 0, False
        # Plain statements, no model instances: a batch holds the room (on SQLite, every
        # writer) for milliseconds. Nothing refers to events.
        events, _ = Event.objects.filter(room=room, seq__lte=upto).delete()
        # Below the kept history, every message no kept event points at.
        gone = list(
            Message.objects.filter(room=room, seq__lte=upto)
            .exclude(Exists(Event.objects.filter(message=OuterRef("pk"))))
            .values_list("pk", flat=True)
        )
        if gone:
            MessageMention.objects.filter(message_id__in=gone).delete()
            Message.objects.filter(reply_to_id__in=gone).update(reply_to=None)
            _delete_rows(Message, gone)
        messages = len(gone)
        Room.objects.filter(pk=room.pk, history_starts_at__lte=upto).update(
            history_starts_at=upto + 1
        )
    return events, messages, len(head) == batch and head[-1][0] == upto


def _delete_rows(model: type[Message], pks: list[int]) -> None:
    """DELETE by primary key, with no collector: the caller has removed every reference."""
    quote = connection.ops.quote_name
    marks = ", ".join(["%s"] * len(pks))
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {quote(model._meta.db_table)} WHERE {quote(model._meta.pk.column)} "
            f"IN ({marks})",
            pks,
        )
