"""The base API views every JSON endpoint inherits: the envelope applies to all of them.

``rooms.api`` builds on these; the roof's own views (the schema fingerprint)
do too. See ``mailbox.api.envelope`` for what the envelope adds.
"""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import MethodNotAllowed
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from common.validation import FINGERPRINT_FIELD
from mailbox.api.auth import IsAgentSession, SessionTokenAuthentication
from mailbox.api.envelope import envelope
from mailbox.models import Session
from mailbox.throttles import SessionRateThrottle

FINGERPRINT_HEADER = "HTTP_PLUMB_SCHEMA_FINGERPRINT"


def parsed_body(request: Request) -> Any:
    """The request's body, or ``{}`` when it does not parse.

    For calls that take no body of their own (GET, DELETE): a body they cannot
    read is ignored rather than refused, while one they can read is still
    checked for unknown fields. Where a body was required, its parse error has
    already been answered.
    """
    try:
        return request.data
    except Exception:  # malformed, of another media type or oversized
        return {}


def _declares_body(request: Request) -> bool:
    """Whether DRF would read a body at all: it reads none whose length is 0 or unreadable."""
    meta = request.META
    try:
        return int(meta.get("CONTENT_LENGTH", meta.get("HTTP_CONTENT_LENGTH", 0))) != 0
    except (ValueError, TypeError):
        return False


def requested_fingerprint(request: Request) -> str | None:
    """The client's fingerprint from the body, the query string or the header.

    A call without a body (every GET agents make) skips DRF's parsing
    machinery, whose answer would be an empty body: a thirtieth of the
    cheapest call.
    """
    data = parsed_body(request) if _declares_body(request) else None
    value = data.get(FINGERPRINT_FIELD) if isinstance(data, dict) else None
    # Nor does it build the query's dict when there is no query.
    if not value and request.META.get("QUERY_STRING"):
        value = request.query_params.get(FINGERPRINT_FIELD)
    value = value or request.META.get(FINGERPRINT_HEADER)
    return value if isinstance(value, str) and value else None


_ALLOWED_METHODS: dict[tuple, list[str]] = {}


class PlumbApiView(APIView):
    """Base of every JSON API view.

    Only the methods a view answers reach its authentication: any other is
    ``405`` before a credential is read, so nothing is touched (SPEC §2). A
    view that takes a credential does not answer ``HEAD``: Django would run
    its GET handler, whose answer delivers notes and moves read positions,
    and the server would drop the body those went into.
    """

    @property
    def allowed_methods(self) -> list[str]:
        # Asked twice a call (by ``initial`` and for the Allow header); Django's answer
        # walks every method name. It depends only on the view's class, its
        # method names and those bound to the instance (``View.setup``'s
        # ``head``, a viewset's actions), and whether it authenticates.
        names = self.http_method_names
        key = (
            type(self),
            tuple(names),
            frozenset(vars(self).keys() & set(names)),
            bool(self.authentication_classes),
        )
        methods = _ALLOWED_METHODS.get(key)
        if methods is None:
            methods = super().allowed_methods
            if self.authentication_classes:
                methods = [m for m in methods if m != "HEAD"]
            _ALLOWED_METHODS[key] = methods
        return list(methods)

    def initial(self, request, *args, **kwargs):
        if request.method not in self.allowed_methods:
            raise MethodNotAllowed(request.method)
        super().initial(request, *args, **kwargs)

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        # Rendered by Django's handler once the view has returned.
        response.add_post_render_callback(_let_go)
        if not isinstance(response.data, dict):
            return response
        # Set by authentication (or by a session start): never read through
        # ``request.auth``, which would authenticate a refused request now.
        session = getattr(request, "plumb_session", None)
        envelope(
            response.data,
            session=session,
            fingerprint=requested_fingerprint(request),
            success=200 <= response.status_code < 300,
        )
        return response


def _let_go(response: Response) -> None:
    """Undo the circles a DRF view leaves among its objects, once its answer is rendered.

    The view holds its request and its answer, and each of them holds the
    view in its context (the request, and the answer, themselves too);
    Django's ``View.setup`` gives a view with ``get`` a ``head`` of its own,
    a method bound to it. Left in circles, a request's objects wait for the
    cyclic garbage collector, whose collections take 20 to 30 µs a request,
    more than a twentieth of the cheapest (``tests/mailbox/test_api_garbage.py``
    shows none are left). Out of them, they go as the request ends. Nothing
    reads these after rendering: the middleware sees Django's request and the
    rendered answer.
    """
    context = response.renderer_context or {}
    response.renderer_context = None
    request = context.get("request")
    if request is not None:
        request.parser_context = None
    view = context.get("view")
    if view is not None:
        vars(view).pop("head", None)


class SessionApiView(PlumbApiView):
    """Base of every view called with a session token."""

    authentication_classes = [SessionTokenAuthentication]
    permission_classes = [IsAgentSession]
    throttle_classes = [SessionRateThrottle]

    @property
    def session(self) -> Session:
        return self.request.auth
