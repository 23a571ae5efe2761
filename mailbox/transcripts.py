"""Conversation transcripts for staff: the notes of one thread, by position."""

from __future__ import annotations

from common.limits import SYSTEM_NAME
from common.markdown import render_markdown
from common.text import visible
from common.transcripts import PAGE_SIZE, Entry, Page, Person, transcript_page
from mailbox.models import Conversation, Note, Participant


def _note_entry(note: Note) -> Entry:
    sender = note.sender_name
    return Entry(
        seq=note.position,
        kind="note",
        created_at=note.created_at,
        # plumb's own notes (bounce notices) have no sender name.
        actor=Person(
            sender.handle if sender is not None else f"{SYSTEM_NAME} (system)",
            kind=note.sender_kind,
        ),
        body=render_markdown(note.body),
        public_id=note.public_id,
        recipient=(
            f"next session in {note.next_workspace}"
            if note.next_workspace_id
            else visible(note.recipient.handle)
        ),
        delivered_at=note.delivered_at,
    )


def conversation_transcript(
    conversation: Conversation, *, after_seq: int, page_size: int = PAGE_SIZE
) -> Page:
    """Notes of ``conversation`` after position ``after_seq``, oldest first."""
    notes = (
        Note.objects.filter(conversation=conversation, position__gt=after_seq)
        .select_related("sender_name", "recipient", "next_workspace__project")
        .order_by("position")[: page_size + 1]
    )
    entries = [_note_entry(note) for note in notes]
    return transcript_page(
        entries, after_seq=after_seq, page_size=page_size, head=conversation.last_position
    )


def conversation_participants(conversation: Conversation) -> list[Participant]:
    return list(
        Participant.objects.filter(conversation=conversation)
        .select_related("name__workspace__project")
        .order_by("joined_at", "id")
    )
