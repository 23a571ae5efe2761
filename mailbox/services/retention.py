"""Deleting a project's old notes (SPEC §8 ``retention_days``); rooms purge their events.

``rooms.services.retention`` runs the whole purge (it may import both
halves); this module holds the mailbox's part. Notes are deleted in
batches of ``PURGE_BATCH``, each a short transaction of its own, so that
sends and claims never queue long behind the purge.

A note goes once it was sent before the cutoff *and* stopped waiting
before it (delivered or bounced): a note the purge has just bounced stays,
so its sender can still read what bounced, until its bounce is itself
older than the retention. A conversation goes with its last note; its
positions, like a room's seqs, are never reused (``last_position`` stays
on the row until the row goes).

A full-text index over notes follows these deletions where
``notes_purge`` deletes (``Note.objects.filter(pk__in=...).delete()``).
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.db.models import Exists, OuterRef

from common.pause import pause_point
from mailbox.models import Conversation, Note, Project
from mailbox.services.bounces import of_project

PURGE_BATCH = 100


def notes_purge(project: Project, cutoff: datetime, *, batch: int = PURGE_BATCH) -> tuple[int, int]:
    """Delete ``project``'s notes settled before ``cutoff``, and threads left empty.

    Returns (notes, conversations) deleted. Idempotent; raises no domain error.
    """
    old = Note.objects.filter(
        of_project(project), created_at__lt=cutoff, delivered_at__lt=cutoff
    ).order_by()
    notes = conversations = 0
    while True:
        with transaction.atomic(durable=True):
            rows = list(old.values_list("id", "conversation_id")[:batch])
            if not rows:
                return notes, conversations
            Note.objects.filter(pk__in=[pk for pk, _ in rows]).delete()
            notes += len(rows)
            # Locked before the look for notes, as a reply locks its thread: a
            # reply committed meanwhile is seen by the look (a later statement),
            # and one that comes after finds its thread gone.
            threads = list(
                Conversation.objects.select_for_update()
                .filter(pk__in={conversation for _, conversation in rows})
                .order_by("pk")
                .values_list("pk", flat=True)
            )
            pause_point("purge.notes_deleted")
            empty = Conversation.objects.filter(pk__in=threads).exclude(
                Exists(Note.objects.filter(conversation=OuterRef("pk")))
            )
            conversations += empty.delete()[1].get(Conversation._meta.label, 0)
        if len(rows) < batch:
            return notes, conversations
