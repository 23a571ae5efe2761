"""Delivering notes exactly once (SPEC §3.4): the claim. What waits for a session is
``selectors.pending_branches``. Waiting for one's sent notes to be picked up
(SPEC §3.6) is here too; bouncing them is in ``bounces``."""

from __future__ import annotations

import secrets

from django.db import transaction
from django.utils import timezone

from common import limits, metrics, wake
from common.pause import pause_point
from common.prepared import Prepared, PreparedObjects, PreparedUpdate
from mailbox import wakeups
from mailbox.models import (
    Conversation,
    Note,
    Participant,
    Session,
)
from mailbox.selectors import (
    notes_sent_for_session,
    notes_settled,
    notes_waiting_ids,
    pending_branches,
)

# Notes handed out by one response at most; the rest follow on the next call.
MAX_CLAIM = 500


# A claim runs on every call that finds notes waiting: its statements are
# compiled once per process (common.prepared).
def _candidates_query(session_pk, name_id, workspace_id, watermark):
    first, *rest = [
        Note.objects.filter(branch).order_by().values_list("id")
        for branch in pending_branches(session_pk, name_id, workspace_id, watermark)
    ]
    return first.union(*rest).order_by("id")[:MAX_CLAIM]


_candidates = Prepared(
    _candidates_query, params=["session_pk", "name_id", "workspace_id", "watermark"]
)
_stamp_claim = PreparedUpdate(
    Note, ["delivered_to", "delivered_at", "claim"], where='"delivered_at" IS NULL'
)
# A delivered note with everything its JSON shows: the thread, the sender
# with its workspace and project, and the addressee (a name, or a workspace);
# the receiving session is the claimer. Read back, each note also tells its
# sender's waiting list_sent_notes calls, on every host (wake.NotifyEach: on
# PostgreSQL in this very query, so the claim runs no statement for it).
_claimed = PreparedObjects(
    lambda claim: (
        Note.objects.filter(claim=claim)
        .annotate(told_sender=wake.NotifyEach(wakeups.SENT_PREFIX, "sender_name_id"))
        .order_by("id")
    ),
    params=["claim"],
    related=["conversation", "sender_name__workspace__project", "recipient", "next_workspace"],
    annotations=["told_sender"],
)
_delivered_to = Note._meta.get_field("delivered_to")


def notes_claim(session: Session, *, conversation: Conversation | None = None) -> list[Note]:
    """Deliver every pending note to ``session``, exactly once, oldest first.

    ``conversation`` narrows the claim to that thread's notes: a person
    opening a thread in the admin receives its notes, and no other thread's
    (``mailbox.services.people``).

    Authentication leaves ``session.notes_maybe_pending``; when it says
    nothing was pending a moment ago, the first claim of the request is
    skipped (a note committed in between is delivered by the next call, as
    if it had come a moment later). Otherwise a conditional UPDATE stamps a
    fresh claim token on the rows that are still undelivered; of several
    racing claimers each row goes to whichever UPDATE reaches it first
    (PostgreSQL re-checks ``delivered_at IS NULL`` after waiting on the row
    lock; SQLite runs writers one at a time), and each claimer reads back
    only the rows carrying its own token.
    """
    if conversation is not None:
        candidate_ids = _candidate_ids_in(session, conversation)
    elif not getattr(session, "notes_maybe_pending", True):
        session.notes_maybe_pending = True  # a hint for one claim, not for the request
        return []
    else:
        candidate_ids = [
            row[0]
            for row in _candidates.rows(
                session_pk=session.pk,
                name_id=session.name_id,
                workspace_id=session.workspace_id,
                watermark=session.notes_watermark,
            )
        ]
    if not candidate_ids:
        return []
    pause_point("claim.candidates")
    claim = secrets.token_hex(16)
    # Only ``delivered_at IS NULL`` needs checking again: whatever else made
    # a candidate pending for this session cannot change while it waits
    # (unbinding at a session's end leaves it pending for the same name).
    claimed = _stamp_claim.update_in(
        candidate_ids, delivered_to_id=session.pk, delivered_at=timezone.now(), claim=claim
    )
    if not claimed:
        return []
    pause_point("claim.stamped")
    # Counted once the claim is committed: a caller's transaction that rolls
    # back leaves the notes pending, and uncounted.
    transaction.on_commit(lambda: metrics.NOTES_DELIVERED.inc(claimed))
    notes = [found[""] for found in _claimed.all(claim=claim)]
    for note in notes:
        _delivered_to.set_cached_value(note, session)
    wake.published_by_query(
        wakeups.sent_topic(n.sender_name_id) for n in notes if n.sender_name_id is not None
    )
    # Whoever receives a "next" note joins its thread, so that it can reply.
    next_conversations = {n.conversation_id for n in notes if n.next_workspace_id}
    if next_conversations:
        Participant.objects.bulk_create(
            [Participant(conversation_id=c, name_id=session.name_id) for c in next_conversations],
            ignore_conflicts=True,
        )
    return notes


def _candidate_ids_in(session: Session, conversation: Conversation) -> list[int]:
    """The notes of one thread pending for ``session``; the thread's (conversation,
    position) index bounds the look to its notes."""
    branches = pending_branches(
        session.pk, session.name_id, session.workspace_id, session.notes_watermark
    )
    pending = branches[0] | branches[1] | branches[2]
    return list(
        Note.objects.filter(pending, conversation=conversation)
        .order_by("id")
        .values_list("id", flat=True)[:MAX_CLAIM]
    )


def notes_wait(session: Session, *, wait: float) -> list[Note]:
    """Claim pending notes, holding up to ``wait`` seconds until one arrives.

    Waiting follows the one rule of ``mailbox/wakeups.py``: woken by the
    commit of a note for the session, from any process or host, no query
    while nothing happens, no transaction held; a newer waiting call of the
    session (notes, room or activity) makes this one answer with no notes,
    and a process whose waiting places are all taken answers at once.
    """
    return wakeups.wait_for(
        session,
        lambda: notes_claim(session) or None,
        seconds=wait,
        idle=list,
        topics=wakeups.session_topics(session),
    )


def notes_unbind(session_ids: list[int]) -> None:
    """Bound notes of ended sessions fall back to their name: none is stranded."""
    Note.objects.filter(bound_session_id__in=session_ids, delivered_at__isnull=True).update(
        bound_session=None
    )


# How many of a name's waiting notes a waiting list_sent_notes call watches:
# the newest, which are the ones an agent waits on.
SENT_WATCHED = 1000


def notes_sent_wait(
    session: Session,
    *,
    state: str | None = None,
    after_id: str | None = None,
    limit: int = limits.PAGE_DEFAULT,
    wait: float = 0,
) -> tuple[list[Note], bool]:
    """A page of the notes sent by the caller's name (``selectors.notes_sent_for_session``),
    once one of its waiting notes is delivered or bounced, or ``wait`` seconds pass.

    Without ``wait``, or with nothing of the name's waiting, it answers at
    once. Otherwise it waits by the one rule of ``mailbox/wakeups.py``, woken
    by the claims and bounces of the name's notes (``wakeups.sent_topic``),
    and answers as soon as a note that was waiting when the call began no
    longer is. Raises ``note_not_found`` for an ``after_id`` not of the name's.
    """

    def page() -> tuple[list[Note], bool]:
        return notes_sent_for_session(session, state=state, after_id=after_id, limit=limit)

    if wait <= 0:
        return page()

    def check(waiting: list[int]) -> tuple[list[Note], bool] | None:
        if not waiting or notes_settled(waiting):
            return page()
        return None

    return wakeups.wait_for(
        session,
        check,
        seconds=wait,
        idle=page,
        topics=[wakeups.sent_topic(session.name_id)],
        since=lambda: notes_waiting_ids(session.name_id, limit=SENT_WATCHED),
    )
