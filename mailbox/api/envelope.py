"""The response envelope every successful session call carries, REST and MCP alike.

Two promises of SPEC §2, kept once:

* every successful session response carries a top-level ``notes`` array with
  the notes that were pending for the session, now delivered (SPEC §3.4);
* a call that names a ``tool_schema_fingerprint`` different from the server's
  is told so in ``schema_stale`` (never blocked).

An error response gets ``schema_stale`` but never ``notes``: a note is
delivered only on a reply the client is sure to read as a success.
"""

from __future__ import annotations

from typing import Any

from common.schema import schema_stale
from mailbox.models import Session
from mailbox.representation import notes_json
from mailbox.services import notes_claim


def deliver_notes(session: Session) -> list[dict[str, Any]]:
    """Claim the notes pending for ``session`` and return them as agents see them."""
    notes = notes_claim(session)
    return notes_json(notes) if notes else []


def envelope(
    payload: dict[str, Any], *, session: Session | None, fingerprint: str | None, success: bool
) -> dict[str, Any]:
    """Add ``notes`` (successes with a session) and ``schema_stale`` to ``payload``.

    A call that delivered notes itself (``check_messages``) has set ``notes``
    already; it is left as it is.
    """
    stale = schema_stale(fingerprint)
    if stale is not None:
        payload["schema_stale"] = stale
    if success and session is not None and "notes" not in payload:
        payload["notes"] = deliver_notes(session)
    return payload
