"""Keep HTML out of the API: Django's own error pages become the JSON error shape.

DRF renders errors raised inside API views, but some failures happen before a
view runs (an unknown path, a disallowed Host header, a crash in middleware)
and Django answers those with HTML. This middleware, placed outermost,
rewrites any non-JSON error response into the one error shape (SPEC §2):
everywhere outside ``/admin/``, unknown paths included. Only a browser
(``Accept: text/html``) outside the API's paths keeps Django's page.
"""

import time
from collections.abc import Callable

from django.contrib.auth.middleware import AuthenticationMiddleware as DjangoAuthentication
from django.contrib.messages.middleware import MessageMiddleware as DjangoMessages
from django.contrib.sessions.middleware import SessionMiddleware as DjangoSessions
from django.http import HttpRequest, HttpResponse
from django.middleware.common import CommonMiddleware as DjangoCommon
from django.middleware.csrf import CsrfViewMiddleware as DjangoCsrf

from common import metrics
from common.errors import error_response

API_PREFIXES = ("/api/", "/mcp", "/healthz", "/metrics")
ADMIN_PREFIX = "/admin/"

_CODES = {
    400: ("bad_request", "The request was malformed."),
    403: ("forbidden", "You may not do this."),
    404: ("not_found", "Nothing exists at this address."),
    405: ("method_not_allowed", "This method is not allowed here."),
    413: ("request_too_large", "The request body is larger than the server accepts."),
    500: ("internal_error", "The server failed to handle this request."),
}


def _errors_are_json(request: HttpRequest) -> bool:
    path = request.path
    if path.startswith(ADMIN_PREFIX):
        return False
    if path.startswith(API_PREFIXES) or path == "/api":
        return True
    return "text/html" not in request.headers.get("Accept", "")


class ApiErrorMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            response.status_code >= 400
            and not response.get("Content-Type", "").startswith("application/json")
            and _errors_are_json(request)
        ):
            code, message = _CODES.get(
                response.status_code, (f"http_{response.status_code}", "The request failed.")
            )
            replacement = error_response(response.status_code, code, message)
            for header in ("Allow", "Retry-After", "WWW-Authenticate"):
                if header in response:
                    replacement[header] = response[header]
            return replacement
        return response


class RequestMetricsMiddleware:
    """Counts every answered request and how long it took (``GET /metrics``).

    Outside the error middleware, so the status counted is the one sent. The
    operation is the URL's name (``notes``, ``room-messages``,
    ``admin:index``), or what the MCP endpoint named (``mcp:send_message``).

    Under the server's front (``plumb_site/asgi.py``) this only names the
    request (``metrics.FRONT_LABELS``) and the front counts it once answered:
    a waiting call runs here once per look, parked on the event loop between
    them, and its client may leave before its answer. Elsewhere
    (``runserver``, tests, another WSGI server) it counts the request here.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        front = request.environ.get(metrics.FRONT_LABELS)
        if front is None:
            started = time.perf_counter()
            response = self.get_response(request)
            metrics.request_observe(request, response.status_code, time.perf_counter() - started)
            return response
        status = None
        try:
            response = self.get_response(request)
            status = response.status_code
            return response
        finally:
            # Also when the call parks (wake.Parked): its client may leave while it waits.
            front["labels"] = metrics.request_labels(request, status)


def is_api_path(path: str) -> bool:
    """Whether ``path`` is one of the doors agents call with bearer credentials."""
    return path.startswith(API_PREFIXES)


class _BrowserOnly:
    """Django's middleware for browsers, skipped on the paths agents call.

    The admin (and the home page) keep sessions, the logged-in user, messages
    and CSRF cookies. The API, MCP, ``/healthz`` and ``/metrics`` need none of
    them: a caller there is named by its bearer credential
    (``mailbox.callers``), never by a cookie, so no cookie can carry a forged
    request (every view there is ``csrf_exempt`` besides). Building a session
    store, a lazy user and a message store for each of their requests cost a
    twentieth of the cheapest one. The admin's system checks find these
    classes, subclasses of Django's.
    """

    get_response: Callable[[HttpRequest], HttpResponse]

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if is_api_path(request.path_info):
            return self.get_response(request)
        return super().__call__(request)


class SessionMiddleware(_BrowserOnly, DjangoSessions):
    pass


class CommonMiddleware(DjangoCommon):
    """Django's, which on the paths agents call only checks the Host header.

    ``request.get_host()`` refuses a host outside ``ALLOWED_HOSTS`` (``400``
    in the API's error shape): that check holds on every path. The rest of
    Django's rules do nothing there (``APPEND_SLASH``, ``PREPEND_WWW`` and
    ``DISALLOWED_USER_AGENTS`` are off), and the front states each answer's
    ``Content-Length`` (``plumb_site/asgi.py``).
    """

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if is_api_path(request.path_info):
            request.get_host()
            return self.get_response(request)
        return super().__call__(request)


class CsrfViewMiddleware(_BrowserOnly, DjangoCsrf):
    pass


class AuthenticationMiddleware(_BrowserOnly, DjangoAuthentication):
    pass


class MessageMiddleware(_BrowserOnly, DjangoMessages):
    pass
