"""Leaving notes (SPEC §3.2, §3.3) and locking threads; delivery is in ``delivery``."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from common import metrics, wake
from common.bodies import body_prepare, idempotency_key_check
from common.errors import ValidationFailed
from common.pause import pause_point
from common.prepared import PreparedInsert, PreparedObjects, Ref, Writes, new
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
    NOTE_INDEX,
    AgentName,
    AuthorKind,
    Conversation,
    DailyUsage,
    Note,
    Participant,
    Session,
)
from mailbox.selectors import open_sessions_of_name_locked, optin_allows
from mailbox.services.audit import audit_record, reason_check
from mailbox.services.budgets import budget_spend

NEXT = "next"


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
    ``conversation_exhausted``, ``idempotency_key_reused`` and
    ``budget_exhausted`` (the sender project's ``daily_note_budget``, counted
    in this transaction: ``budgets.budget_spend``). Every check runs before
    anything is written, so a refused note stores nothing and leaves its
    idempotency key unused. Locks the conversation row while counting, then
    the day's budget counter.

    People (``mailbox.services.people``) leave notes here too, from the admin:
    theirs name their recipient (``next`` is a workspace's, and a person has
    none); notes to and from them need no cross-project opt-in, and their home
    sets no cap (``_check_may_send``, ``_cap_for``).
    """
    prepared = body_prepare(body)
    idempotency_key_check(idempotency_key)
    if to is not None and (not isinstance(to, str) or not to):
        raise ValidationFailed.field("to", "Invalid.", "to must be a name or 'next'.")
    # people: a person's note names its recipient.
    if session.name.kind == AuthorKind.HUMAN and (
        to == NEXT or (to is None and conversation_id is None)
    ):
        raise ValidationFailed.field("to", "A person's note names its recipient.")
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
            # The index's words, worked out before the transaction (common/search/).
            indexed=NOTE_INDEX.prepare(prepared.text),
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
            "conversation",
            "recipient",
            "sender_name__workspace__project",
            "next_workspace",
            "delivered_to__name",
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
            note_id=original.public_id, conversation_id=original.conversation.public_id
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
    indexed: str,
    to: str | None,
    conversation_id: str | None,
    idempotency_key: str | None,
) -> NoteLeft:
    # One transaction: the recipient checks, the cap count, the insert and the
    # binding are a unit. On PostgreSQL the conversation row lock serialises
    # replies into one thread; on SQLite the IMMEDIATE transaction does.
    # Durable: inside a caller's transaction the note would be invisible (and
    # its locks held) until the caller commits.
    # One cursor for the note's own statements, as a send does.
    with transaction.atomic(durable=True), connection.cursor() as cursor:
        now = timezone.now()
        new_thread = conversation_id is None
        # The thread, the note, its words, its participants and the wake-up:
        # one statement on PostgreSQL (common.prepared.Writes), sent once the
        # checks and locks below are done.
        writes = Writes(cursor)
        if new_thread:
            addressee = _resolve_addressee(session, to if to is not None else NEXT, cursor)
            _check_may_send(session, addressee, conversation=None)
            # Inserted with its first note counted: no UPDATE follows.
            conversation = Conversation(
                cap=_cap_for(session, addressee),
                notes_count=1,
                last_position=1,
                created_at=now,
                last_note_at=now,
            )
            writes.insert(_insert_conversation, conversation)
        else:
            conversation = _conversation_for_reply(session, conversation_id)
            if to is None:
                addressee = _the_other_participant(session, conversation)
            else:
                addressee = _resolve_addressee(session, to, cursor)
            _check_may_send(session, addressee, conversation=conversation)
            if conversation.locked_at is not None:
                raise ConversationLocked()
            if conversation.notes_count >= conversation.cap:
                raise ConversationExhausted(
                    cap=conversation.cap, conversation_id=conversation.public_id
                )

        # Last of the checks, so that a refusal above takes nothing from the budget;
        # a refusal here rolls back the whole transaction.
        sender_project = session.workspace.project
        budget_spend(
            sender_project,
            DailyUsage.What.NOTES,
            budget=sender_project.daily_note_budget,
            author_kind=session.name.kind,
            now=now,
            cursor=cursor,
        )
        bound_id = None
        if addressee.is_next:
            delivery = Note.Delivery.NEXT
        else:
            bound_id = _connected_session_id(addressee.name.pk, now, cursor)
            delivery = Note.Delivery.SESSION if bound_id is not None else Note.Delivery.NAME

        position = 1 if new_thread else conversation.last_position + 1
        note = new(
            Note,
            conversation=conversation,
            position=position,
            sender_name=session.name,
            sender_kind=session.name.kind,
            sender_session=session,
            recipient=addressee.name,
            next_workspace=session.workspace if addressee.is_next else None,
            body=text,
            created_at=now,
            idempotency_key=idempotency_key,
            delivery=delivery,
            bound_session_id=bound_id,
        )
        # A new thread has no key until the writes run.
        writes.insert(
            _insert_note, note, refs={"conversation_id": conversation} if new_thread else None
        )
        # Searchable by its participants the moment note_leave returns (SPEC §9).
        NOTE_INDEX.insert_with(writes, Ref(note), indexed)
        if new_thread:
            # Nobody else knows the thread yet: its participants are inserted
            # outright, the sender as having written.
            names = [session.name]
            if addressee.name is not None and addressee.name.pk != session.name_id:
                names.append(addressee.name)
            participants = [
                Participant(
                    conversation=conversation,
                    name=name,
                    joined_at=now,
                    has_written=name is session.name,
                )
                for name in names
            ]
            writes.insert_many(
                _insert_participant, participants, refs={"conversation_id": conversation}
            )
        if addressee.is_next:
            # Its topic names the note's key, which the writes are yet to return.
            writes.run()
            wake.publish(wakeups.note_topics(note))
        else:
            wake.publish_with(writes, wakeups.note_topics(note))
            writes.run()
        if not new_thread:
            Conversation.objects.filter(pk=conversation.pk).update(
                notes_count=F("notes_count") + 1, last_position=position, last_note_at=now
            )
            conversation.notes_count += 1
            conversation.last_position = position
            conversation.last_note_at = now
            _add_participant(conversation, session.name, wrote=True)
            if addressee.name is not None:
                _add_participant(conversation, addressee.name, wrote=False)
        pause_point("note.stored")

    note.conversation = conversation
    note.sender_name = session.name
    # A name is bound to its session's workspace: reuse the loaded rows.
    note.sender_name.workspace = session.workspace
    return NoteLeft(note=note, delivery=delivery, exchanges_left=conversation.exchanges_left)


# Every note to a name runs these; their SQL is built once per process
# (common.prepared). The mailbox's models have no signal receivers.
_insert_conversation = PreparedInsert(Conversation)
_insert_note = PreparedInsert(Note)
_insert_participant = PreparedInsert(Participant)
# Locked until commit (the name's row only, not its workspace's or
# project's): names_free, which may delete a generated name nobody relies
# on, then waits for this note and sees it, or this look waits for the
# freeing and finds no such name (see there). FOR NO KEY UPDATE leaves
# other writers' foreign-key checks on the name unblocked.
_name_for_note = PreparedObjects(
    lambda handle: AgentName.objects.select_for_update(no_key=True, of=("self",)).filter(
        handle=handle
    ),
    params=["handle"],
    related=["workspace__project"],
)


def _resolve_addressee(session: Session, to: str, cursor) -> _Addressee:
    if to == NEXT:
        return _Addressee(name=None)
    found = _name_for_note.first(cursor=cursor, handle=to)
    if found is None:
        raise RecipientNotFound(f"No agent is named {to!r}.", to=to)
    return _Addressee(name=found[""])


def _connected_session_id(name_id: int, now, cursor) -> int | None:
    """The name's connected session, locked until commit, to bind the note to."""
    threshold = now - timedelta(seconds=settings.PLUMB_SESSION_TTL)
    for session_id, last_seen_at in open_sessions_of_name_locked.rows(
        cursor=cursor, name_id=name_id
    ):
        if last_seen_at >= threshold:
            return session_id
    return None


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
    # people: staff of the whole server (SPEC §5.1), so notes to and from them
    # cross projects without an opt-in.
    if AuthorKind.HUMAN in (addressee.name.kind, session.name.kind):
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
            recipient_project=recipient_project.slug, your_project=sender_project.slug
        )


def _cap_for(session: Session, addressee: _Addressee) -> int:
    sender_project = session.workspace.project
    if addressee.is_next:
        return sender_project.max_exchanges
    recipient_project = addressee.name.workspace.project
    # people: their home has no say; a thread with a person runs on the agent's project's.
    if addressee.name.kind == AuthorKind.HUMAN:
        return sender_project.max_exchanges
    if session.name.kind == AuthorKind.HUMAN:
        return recipient_project.max_exchanges
    return min(sender_project.max_exchanges, recipient_project.max_exchanges)


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
            participants_other_than_you=len(others) if len(others) < 2 else "2+"
        )
    return _Addressee(name=others[0])


def _add_participant(conversation: Conversation, name: AgentName, *, wrote: bool) -> None:
    participant, _ = Participant.objects.get_or_create(conversation=conversation, name=name)
    if wrote and not participant.has_written:
        Participant.objects.filter(pk=participant.pk).update(has_written=True)


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
