"""Delivery of pending notes onto responses (SPEC §3.4): the envelope's hook."""

from typing import Any

from mailbox.api.serializers import NoteSerializer
from mailbox.models import Session
from mailbox.services import notes_claim


def notes_deliver_serialized(session: Session) -> list[dict[str, Any]]:
    """Claim the notes pending for ``session`` and return them serialised."""
    notes = notes_claim(session)
    return NoteSerializer(notes, many=True).data if notes else []
