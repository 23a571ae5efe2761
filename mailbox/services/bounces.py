"""Bouncing the notes nobody picked up (SPEC §3.6): delivered or bounced, never both.

A note still waiting ``note_ttl`` seconds after it was sent (its sender
project's setting) is bounced: the same conditional UPDATE on
``delivered_at`` that a claim runs (``delivery.notes_claim``), with
``bounced_at`` set too. Whichever of the two reaches the row first wins,
and every pending-notes query already leaves out a note whose
``delivered_at`` is set, so a bounced note is never delivered afterwards.
In the same transaction plumb leaves the sender's name a note of its own
(``sender_kind`` "system", ``bounce_of`` the bounced note) in the same
thread; it takes a position but not an exchange. A note of plumb's that
nobody picks up bounces as well, after its recipient project's
``note_ttl``, with no notice about it.

plumb's server runs ``notes_bounce`` every few seconds (``plumb_site/jobs.py``).
It is idempotent, and works in batches of ``BOUNCE_BATCH`` notes, each its
own short transaction, so that sends and claims never queue long behind it.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import Case, Q, QuerySet, Value, When
from django.utils import timezone

from common import metrics, wake
from common.pause import pause_point
from mailbox import wakeups
from mailbox.models import NOTE_INDEX, AuthorKind, Conversation, Note, Project

# Notes bounced per transaction: a batch holds its locks for milliseconds.
BOUNCE_BATCH = 100


def notes_bounce(*, now: datetime | None = None, batch: int = BOUNCE_BATCH) -> int:
    """Bounce every note waiting past its ``note_ttl``; returns how many it bounced.

    A batch at a time: the candidates are read, then locked (PostgreSQL skips
    rows a claim holds right now: that claim delivers them, or, if it rolls
    back, the next run bounces them) and stamped by a conditional UPDATE,
    then the notices are inserted, each thread's row locked for its
    position. Raises no domain error.
    """
    now = now or timezone.now()
    total = 0
    while True:
        # Unordered: both databases then read the pending notes alone, through
        # their partial index (note_pending_next), never the delivered history.
        candidates = list(_overdue(now).order_by().values_list("id", flat=True)[:batch])
        if not candidates:
            return total
        pause_point("bounce.candidates")
        total += _bounce(candidates, now)
        if len(candidates) < batch:
            return total


def notes_bounce_sent_before(project: Project, cutoff: datetime, *, now: datetime) -> int:
    """Bounce ``project``'s notes still waiting that were sent before ``cutoff``.

    The retention purge runs this first (SPEC §8), whatever the notes'
    ``note_ttl``: a note about to be purged is never deleted undelivered, it
    bounces, and its sender hears of it. Notes of ``project`` are those its
    agents sent, and plumb's own notices to them. Batches as ``notes_bounce``.
    """
    total = 0
    waiting = Note.objects.filter(
        of_project(project), delivered_at__isnull=True, created_at__lt=cutoff
    )
    while True:
        candidates = list(waiting.order_by().values_list("id", flat=True)[:BOUNCE_BATCH])
        if not candidates:
            return total
        bounced = _bounce(candidates, now)
        total += bounced
        if len(candidates) < BOUNCE_BATCH or not bounced:
            return total


def of_project(project: Project) -> Q:
    """Notes that belong to ``project``: sent by its agents, or plumb's notices to them."""
    return Q(sender_name__workspace__project=project) | Q(
        sender_name__isnull=True, recipient__workspace__project=project
    )


def _overdue(now: datetime) -> QuerySet[Note]:
    """Notes still waiting past the ``note_ttl`` of their project: the sender's, or for
    plumb's own notes the recipient's. One query, with a condition per TTL in use."""
    ttls = sorted(set(Project.objects.values_list("note_ttl", flat=True)))
    if not ttls:
        return Note.objects.none()
    overdue = Q()
    for ttl in ttls:
        of_project = Q(sender_name__workspace__project__note_ttl=ttl) | Q(
            sender_name__isnull=True, recipient__workspace__project__note_ttl=ttl
        )
        overdue |= of_project & Q(created_at__lt=now - timedelta(seconds=ttl))
    return Note.objects.filter(overdue, delivered_at__isnull=True)


def _bounce(candidates: list[int], now: datetime) -> int:
    token = secrets.token_hex(16)
    # Durable: a caller's transaction would hold these locks until it ends.
    with transaction.atomic(durable=True):
        # Locked in id order, skipping any a claim is stamping right now (it
        # wins them): the bounce never waits for a claim, so the two cannot
        # deadlock on rows they lock in different orders. On SQLite the
        # IMMEDIATE transaction has the database to itself instead.
        locked = list(
            Note.objects.select_for_update(no_key=True, skip_locked=True)
            .filter(pk__in=candidates, delivered_at__isnull=True)
            .order_by("id")
            .values_list("id", flat=True)
        )
        pause_point("bounce.locked")
        # The same condition as the claim's: a note delivered since the look
        # above (SQLite, or a claim that committed in between) is left alone.
        bounced = Note.objects.filter(pk__in=locked, delivered_at__isnull=True).update(
            delivered_at=now, bounced_at=now, claim=token
        )
        if not bounced:
            return 0
        notes = list(
            Note.objects.filter(claim=token)
            .select_related(
                "conversation", "recipient", "next_workspace", "sender_name__workspace__project"
            )
            .order_by("id")
        )
        notices = _notices_for([n for n in notes if n.sender_name_id is not None], now)
        topics = {wakeups.sent_topic(n.sender_name_id) for n in notes if n.sender_name_id}
        topics.update(topic for notice in notices for topic in wakeups.note_topics(notice))
        wake.publish(topics)
        pause_point("bounce.stored")
        transaction.on_commit(lambda: metrics.NOTES_BOUNCED.inc(bounced))
    return bounced


def _notices_for(notes: list[Note], now: datetime) -> list[Note]:
    """plumb's note to each sender, at the end of each thread, under the thread's lock."""
    if not notes:
        return []
    # Locked in id order, as note_leave locks a thread to take its next
    # position: a reply and a notice never take the same one.
    threads = {
        c.pk: c
        for c in Conversation.objects.select_for_update(no_key=True)
        .filter(pk__in={n.conversation_id for n in notes})
        .order_by("pk")
    }
    pause_point("bounce.threads_locked")
    notices = []
    for note in notes:
        thread = threads[note.conversation_id]
        thread.last_position += 1
        notices.append(
            Note(
                conversation=thread,
                position=thread.last_position,
                sender_name=None,
                sender_kind=AuthorKind.SYSTEM,
                recipient=note.sender_name,
                body=_notice_text(note),
                created_at=now,
                delivery=Note.Delivery.NAME,
                bounce_of_id=note.public_id,
            )
        )
    Note.objects.bulk_create(notices)
    # Found by search like any note of the thread (SPEC §9), in this transaction.
    with connection.cursor() as cursor:
        for notice in notices:
            NOTE_INDEX.insert_prepared(notice.pk, NOTE_INDEX.prepare(notice.body), cursor=cursor)
    # The notices take positions, not exchanges: notes_count (the cap) stays.
    Conversation.objects.filter(pk__in=threads).update(
        last_position=Case(
            *(When(pk=pk, then=Value(c.last_position)) for pk, c in threads.items())
        ),
        last_note_at=now,
    )
    return notices


def _notice_text(note: Note) -> str:
    if note.next_workspace_id is not None:
        to = f'"next" in workspace {note.next_workspace.slug}'
    else:
        to = note.recipient.handle
    ttl = note.sender_name.workspace.project.note_ttl
    return (
        f"Your note {note.public_id} to {to}, sent {note.created_at:%Y-%m-%d %H:%M:%S} UTC "
        f"(note {note.position} of this thread), was not picked up within "
        f"{_duration(ttl)}. It has bounced: it will never be delivered."
    )


def _duration(seconds: int) -> str:
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}" + ("s" if count != 1 else "")
    return f"{seconds} second" + ("s" if seconds != 1 else "")
