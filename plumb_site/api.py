"""The base API view every session endpoint inherits, and the response envelope.

Two promises of SPEC §2 are kept here, once, instead of in every view:

* every successful session response carries a top-level ``notes`` array with
  the notes that were pending for the session, now delivered;
* a call that names a ``tool_schema_fingerprint`` different from the server's
  is told so in ``schema_stale`` (never blocked).
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any

from drf_spectacular.generators import SchemaGenerator
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mailbox.models import Session
from plumb_site.auth import IsAgentSession, SessionTokenAuthentication
from plumb_site.throttles import SessionRateThrottle

FINGERPRINT_FIELD = "tool_schema_fingerprint"
FINGERPRINT_HEADER = "HTTP_PLUMB_SCHEMA_FINGERPRINT"


_fingerprint_lock = threading.Lock()
_fingerprint: str | None = None


def schema_fingerprint() -> str:
    """A short hash of the published API schema and MCP tool list, computed once per process."""
    global _fingerprint
    if _fingerprint is None:
        with _fingerprint_lock:
            if _fingerprint is None:
                # Imported here: the tool list reads the apps' serializers and models.
                from plumb_site.mcp.schemas import TOOLS

                schema = SchemaGenerator().get_schema(request=None, public=True)
                published = {"openapi": schema, "mcp_tools": TOOLS}
                canonical = json.dumps(published, sort_keys=True, default=str)
                _fingerprint = hashlib.sha256(canonical.encode()).hexdigest()[:16]
    return _fingerprint


def reset_schema_fingerprint() -> None:
    """Forget the cached fingerprint (tests that change the URL conf use it)."""
    global _fingerprint
    with _fingerprint_lock:
        _fingerprint = None


def requested_fingerprint(request: Request) -> str | None:
    """The client's fingerprint from the body, the query string or the header."""
    try:
        data = request.data
    except Exception:  # a body that failed to parse has already been answered
        data = {}
    value = data.get(FINGERPRINT_FIELD) if isinstance(data, dict) else None
    value = value or request.query_params.get(FINGERPRINT_FIELD)
    value = value or request.META.get(FINGERPRINT_HEADER)
    return value if isinstance(value, str) and value else None


def deliver_notes(session: Session) -> list[dict[str, Any]]:
    """Claim and serialise the notes pending for ``session`` (SPEC §3.4)."""
    from mailbox.delivery import notes_deliver_serialized

    return notes_deliver_serialized(session)


def envelope(request: Request, response: Response) -> Response:
    """Add ``notes`` and ``schema_stale`` to a JSON object response."""
    if not isinstance(response.data, dict):
        return response
    fingerprint = requested_fingerprint(request)
    if fingerprint is not None and fingerprint != schema_fingerprint():
        response.data["schema_stale"] = {"current": schema_fingerprint()}
    if 200 <= response.status_code < 300:
        session = getattr(request, "plumb_session", None)
        if session is None and isinstance(request.auth, Session):
            session = request.auth
        # A view that delivered notes itself (check_messages) has set "notes".
        if session is not None and "notes" not in response.data:
            response.data["notes"] = deliver_notes(session)
    return response


class PlumbApiView(APIView):
    """Base of every JSON API view: the envelope applies to all of them."""

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        return envelope(request, response)


class SessionApiView(PlumbApiView):
    """Base of every view called with a session token."""

    authentication_classes = [SessionTokenAuthentication]
    permission_classes = [IsAgentSession]
    throttle_classes = [SessionRateThrottle]

    @property
    def session(self) -> Session:
        return self.request.auth
