"""Delivery of pending notes onto responses (SPEC §3.4).

The foundation only defines the hook the response envelope calls; the
mailbox fills it in with the exactly-once claim.
"""

from typing import Any

from mailbox.models import Session


def notes_deliver_serialized(session: Session) -> list[dict[str, Any]]:
    """Claim the notes pending for ``session`` and return them serialised."""
    return []
