"""Leaving notes and delivering them exactly once (SPEC §3.2 to §3.4)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from django.db import IntegrityError, transaction
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone

from common import metrics, wake
from common.bodies import body_prepare, idempotency_key_check
from common.errors import ValidationFailed
from common.pause import pause_point
from mailbox import wakeups
from mailbox.errors import (
    ConversationExhausted,
    ConversationLocked,
    ConversationNotFound,
    CrossProjectRefused,
    IdempotencyKeyReused,
    MailboxDisabled,
    NotAParticipant,
    RecipientAmbiguous,
    RecipientNotFound,
)
from mailbox.models import (
    AgentName,
    Conversation,
    Note,
    Participant,
    Project,
    Session,
)
from mailbox.selectors import optin_allows
from mailbox.services.audit import audit_record, reason_check

NEXT = "next"
# Notes handed out by one response at most; the rest follow on the next call.
MAX_CLAIM = 500


@dataclass
class NoteLeft:
    note: Note
    delivery: str
    exchanges_left: int
    replayed: bool = False
    scrubbed: list[dict] = field(default_factory=list)


@dataclass(frozen=True)
class _Addressee:
    """Where a note goes: a name, or the next session of a workspace."""

    name: AgentName | None  # None means "next"

    @property
    def is_next(self) -> bool:
        return self.name is None


def note_leave(
    session: Session,
    *,
    body: str,
    to: str | None = None,
    conversation_id: str | None = None,
    idempotency_key: str | None = None,
) -> NoteLeft:
    """Store a note in a new or existing thread and bind it for delivery.

    Raises ``validation_error``, ``body_too_large``, ``recipient_not_found``,
    ``recipient_ambiguous``, ``mailbox_disabled``, ``cross_project_refused``,
    ``conversation_not_found``, ``not_a_participant``, ``conversation_locked``,
    ``conversation_exhausted`` and ``idempotency_key_reused``. Every check runs
    before anything is written, so a refused note stores nothing and leaves its
    idempotency key unused. Locks the conversation row while counting.
    """
    prepared = body_prepare(body)
    idempotency_key_check(idempotency_key)
    if to is not None and (not isinstance(to, str) or not to):
        raise ValidationFailed("to must be a name or 'next'.", details={"to": ["Invalid."]})
    if idempotency_key is not None:
        replay = _replay(session, idempotency_key, prepared.text, to, conversation_id)
        if replay is not None:
            replay.scrubbed = prepared.scrubbed
            return replay

    sender_project = session.workspace.project
    if not sender_project.mailbox_enabled:
        raise MailboxDisabled("The mailbox is turned off for your project.")

    try:
        left = _store(
            session,
            text=prepared.text,
            to=to,
            conversation_id=conversation_id,
            idempotency_key=idempotency_key,
        )
    except IntegrityError:
        # A concurrent retry with the same key committed first: answer as a replay.
        replay = (
            _replay(session, idempotency_key, prepared.text, to, conversation_id)
            if idempotency_key is not None
            else None
        )
        if replay is None:
            raise
        replay.scrubbed = prepared.scrubbed
        return replay
    # _store's transaction is durable: the note is committed by now.
    metrics.NOTES_SENT.inc()
    left.scrubbed = prepared.scrubbed
    return left


def _replay(
    session: Session, key: str, text: str, to: str | None, conversation_id: str | None
) -> NoteLeft | None:
    original = (
        Note.objects.select_related(
            "conversation", "recipient", "sender_name__workspace__project", "next_workspace"
        )
        .filter(sender_name_id=session.name_id, idempotency_key=key)
        .first()
    )
    if original is None:
        return None
    # An omitted "to" means "next" on a new thread and "the other participant"
    # on a reply; only the latter matches whatever the original resolved to.
    requested_to = to if to is not None else (NEXT if conversation_id is None else None)
    same = (
        original.body == text
        and (requested_to is None or requested_to == original.to_display)
        and (conversation_id is None or conversation_id == original.conversation.public_id)
    )
    if not same:
        raise IdempotencyKeyReused(
            details={
                "note_id": original.public_id,
                "conversation_id": original.conversation.public_id,
            }
        )
    return NoteLeft(
        note=original,
        delivery=original.delivery,
        exchanges_left=original.conversation.exchanges_left,
        replayed=True,
    )


def _store(
    session: Session,
    *,
    text: str,
    to: str | None,
    conversation_id: str | None,
    idempotency_key: str | None,
) -> NoteLeft:
    sender_project = session.workspace.project
    # One transaction: the recipient checks, the cap count, the insert and the
    # binding are a unit. On PostgreSQL the conversation row lock serialises
    # replies into one thread; on SQLite the IMMEDIATE transaction does.
    # Durable: inside a caller's transaction the note would be invisible (and
    # its locks held) until the caller commits.
    with transaction.atomic(durable=True):
        now = timezone.now()
        if conversation_id is None:
            addressee = _resolve_addressee(session, to if to is not None else NEXT)
            _check_may_send(session, addressee, conversation=None)
            conversation = Conversation.objects.create(
                cap=_cap_for(sender_project, addressee), created_at=now, last_note_at=now
            )
        else:
            conversation = _conversation_for_reply(session, conversation_id)
            if to is None:
                addressee = _the_other_participant(session, conversation)
            else:
                addressee = _resolve_addressee(session, to)
            _check_may_send(session, addressee, conversation=conversation)
            if conversation.locked_at is not None:
                raise ConversationLocked()
            if conversation.notes_count >= conversation.cap:
                raise ConversationExhausted(
                    details={"cap": conversation.cap, "conversation_id": conversation.public_id}
                )

        bound = None
        if addressee.is_next:
            delivery = Note.Delivery.NEXT
        else:
            # Locked until commit: a session_end racing this note waits here, and
            # its unbinding (a later statement) then sees the note; one that
            # committed first makes PostgreSQL re-check ended_at and skip the row.
            bound = (
                Session.objects.connected(now)
                .select_for_update()
                .filter(name=addressee.name)
                .first()
            )
            delivery = Note.Delivery.SESSION if bound is not None else Note.Delivery.NAME

        position = conversation.notes_count + 1
        note = Note.objects.create(
            conversation=conversation,
            position=position,
            sender_name=session.name,
            sender_session=session,
            recipient=addressee.name,
            next_workspace=session.workspace if addressee.is_next else None,
            body=text,
            created_at=now,
            idempotency_key=idempotency_key,
            delivery=delivery,
            bound_session=bound,
        )
        Conversation.objects.filter(pk=conversation.pk).update(
            notes_count=F("notes_count") + 1, last_note_at=now
        )
        conversation.notes_count = position
        conversation.last_note_at = now
        _add_participant(conversation, session.name, wrote=True)
        if addressee.name is not None:
            _add_participant(conversation, addressee.name, wrote=False)
        wake.publish(wakeups.note_topics(note))
        pause_point("note.stored")

    note.conversation = conversation
    note.sender_name = session.name
    # A name is bound to its session's workspace: reuse the loaded rows.
    note.sender_name.workspace = session.workspace
    return NoteLeft(note=note, delivery=delivery, exchanges_left=conversation.exchanges_left)


def _resolve_addressee(session: Session, to: str) -> _Addressee:
    if to == NEXT:
        return _Addressee(name=None)
    # Locked until commit (the name's row only, not its workspace's or
    # project's): names_free, which may delete a generated name nobody
    # relies on, then waits for this note and sees it, or this look waits
    # for the freeing and finds no such name (see there). FOR NO KEY UPDATE
    # leaves other writers' foreign-key checks on the name unblocked.
    name = (
        AgentName.objects.select_related("workspace__project")
        .select_for_update(no_key=True, of=("self",))
        .filter(handle=to)
        .first()
    )
    if name is None:
        raise RecipientNotFound(f"No agent is named {to!r}.", details={"to": to})
    return _Addressee(name=name)


def _check_may_send(
    session: Session, addressee: _Addressee, *, conversation: Conversation | None
) -> None:
    """Mailbox switches and the cross-project opt-in, checked before any write."""
    if addressee.is_next:
        return  # "next" stays inside the sender's own workspace
    sender_project = session.workspace.project
    recipient_project = addressee.name.workspace.project
    if not recipient_project.mailbox_enabled:
        raise MailboxDisabled("The mailbox is turned off for the recipient's project.")
    if recipient_project.pk == sender_project.pk or recipient_project.accept_all_projects:
        return
    if (
        conversation is not None
        and Participant.objects.filter(
            conversation=conversation, name=addressee.name, has_written=True
        ).exists()
    ):
        return  # they wrote in this thread: the thread itself was consented to
    if not optin_allows(recipient_project, source=sender_project):
        raise CrossProjectRefused(
            details={
                "recipient_project": recipient_project.slug,
                "your_project": sender_project.slug,
            }
        )


def _cap_for(sender_project: Project, addressee: _Addressee) -> int:
    if addressee.is_next:
        return sender_project.max_exchanges
    return min(sender_project.max_exchanges, addressee.name.workspace.project.max_exchanges)


def _conversation_for_reply(session: Session, conversation_id: str) -> Conversation:
    if not isinstance(conversation_id, str):
        raise ConversationNotFound()
    # Row lock: concurrent replies queue here, so each sees the count the
    # previous one committed and the cap cannot be overshot.
    conversation = (
        Conversation.objects.select_for_update().filter(public_id=conversation_id).first()
    )
    if conversation is None:
        raise ConversationNotFound()
    if not Participant.objects.filter(conversation=conversation, name=session.name_id).exists():
        raise NotAParticipant()
    return conversation


def _the_other_participant(session: Session, conversation: Conversation) -> _Addressee:
    others = list(
        AgentName.objects.select_related("workspace__project")
        .filter(participations__conversation=conversation)
        .exclude(pk=session.name_id)[:2]
    )
    if len(others) != 1:
        raise RecipientAmbiguous(
            details={"participants_other_than_you": len(others) if len(others) < 2 else "2+"}
        )
    return _Addressee(name=others[0])


def _add_participant(conversation: Conversation, name: AgentName, *, wrote: bool) -> None:
    participant, _ = Participant.objects.get_or_create(conversation=conversation, name=name)
    if wrote and not participant.has_written:
        Participant.objects.filter(pk=participant.pk).update(has_written=True)


# --- delivery ------------------------------------------------------------------


def _pending_branches(session_pk, name_id, workspace_id, watermark) -> list[Q]:
    """The three ways a note waits for a session (SPEC §3.4), one per partial index.

    Kept apart so that each can be asked on its own: an OR across them leads
    both planners to scan one partial index whole and filter, which grows
    with the stored notes. Arguments are values or ``OuterRef``s.
    """
    return [
        Q(delivered_at__isnull=True, bound_session_id=session_pk),
        Q(delivered_at__isnull=True, bound_session__isnull=True, recipient_id=name_id),
        Q(delivered_at__isnull=True, next_workspace_id=workspace_id, id__lte=watermark)
        & ~Q(sender_session_id=session_pk),
    ]


def _session_branches(session: Session) -> list[Q]:
    return _pending_branches(
        session.pk, session.name_id, session.workspace_id, session.notes_watermark
    )


def _pending_q(session: Session) -> Q:
    """Notes pending for ``session``, as one filter."""
    first, *rest = _session_branches(session)
    for branch in rest:
        first |= branch
    return first


def pending_exists() -> Q:
    """Whether notes wait for the session row of the outer query.

    Authentication asks this in the same query that finds the session, so a
    call with nothing pending (nearly every call) needs no query of its own
    for the piggyback: see ``notes_claim``.
    """
    refs = (OuterRef("pk"), OuterRef("name_id"), OuterRef("workspace_id"))
    branches = _pending_branches(*refs, OuterRef("notes_watermark"))
    first, *rest = [Exists(Note.objects.filter(branch)) for branch in branches]
    for exists in rest:
        first |= exists
    return first


def notes_claim(session: Session) -> list[Note]:
    """Deliver every pending note to ``session``, exactly once, oldest first.

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
    if not getattr(session, "notes_maybe_pending", True):
        session.notes_maybe_pending = True  # a hint for one claim, not for the request
        return []
    first, *rest = [
        Note.objects.filter(branch).order_by().values_list("id", flat=True)
        for branch in _session_branches(session)
    ]
    candidate_ids = list(first.union(*rest).order_by("id")[:MAX_CLAIM])
    if not candidate_ids:
        return []
    pause_point("claim.candidates")
    claim = secrets.token_hex(16)
    now = timezone.now()
    claimed = Note.objects.filter(_pending_q(session), id__in=candidate_ids).update(
        delivered_to=session, delivered_at=now, claim=claim
    )
    if not claimed:
        return []
    # Counted once the claim is committed: a caller's transaction that rolls
    # back leaves the notes pending, and uncounted.
    transaction.on_commit(lambda: metrics.NOTES_DELIVERED.inc(claimed))
    notes = list(
        Note.objects.filter(claim=claim)
        .select_related(
            "conversation",
            "recipient",
            "next_workspace",
            "sender_name__workspace__project",
        )
        .order_by("id")
    )
    # Whoever receives a "next" note joins its thread, so that it can reply.
    next_conversations = {n.conversation_id for n in notes if n.next_workspace_id}
    if next_conversations:
        Participant.objects.bulk_create(
            [Participant(conversation_id=c, name_id=session.name_id) for c in next_conversations],
            ignore_conflicts=True,
        )
    return notes


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


# --- moderation -------------------------------------------------------------------


def conversation_lock(conversation: Conversation, *, actor: str, reason: str) -> bool:
    """Lock a thread: further notes get ``409 conversation_locked``; history stays.

    Returns whether anything changed; locking a locked thread records nothing.
    """
    reason = reason_check(reason, required=True)
    return _conversation_set_lock(conversation, locked=True, actor=actor, reason=reason)


def conversation_unlock(conversation: Conversation, *, actor: str, reason: str = "") -> bool:
    reason = reason_check(reason, required=False)
    return _conversation_set_lock(conversation, locked=False, actor=actor, reason=reason)


def _conversation_set_lock(
    conversation: Conversation, *, locked: bool, actor: str, reason: str
) -> bool:
    with transaction.atomic():
        changed = Conversation.objects.filter(pk=conversation.pk, locked_at__isnull=locked).update(
            locked_at=timezone.now() if locked else None
        )
        if changed:
            # The thread's project is its first sender's, so the record can be
            # found by project like every other.
            first = (
                conversation.notes.order_by("position")
                .select_related("sender_name__workspace__project")
                .first()
            )
            audit_record(
                actor=actor,
                action="conversation.lock" if locked else "conversation.unlock",
                project=first.sender_name.workspace.project if first else None,
                target=f"conversation {conversation.public_id}",
                reason=reason,
            )
    conversation.refresh_from_db(fields=["locked_at"])
    return bool(changed)
