import functools
import io
import json
import os

import django
from django.conf import settings
from django.core.handlers.wsgi import WSGIHandler
from django.urls import ResolverMatch, URLResolver, get_resolver

from common.gate import gate
from plumb_site.mcp.jsonrpc import refused_before_reading

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "plumb_site.settings")


@functools.lru_cache(maxsize=2048)
def _resolved(resolver: URLResolver, path: str) -> ResolverMatch:
    return resolver.resolve(path)


class _Handler(WSGIHandler):
    """Django's WSGI handler, each path resolved once per URLconf and process.

    Resolving walks the URLconf's nested patterns and builds a match at each
    level: about 50 µs, a twentieth of the cheapest session call, for an
    answer that depends on the path alone. The match is shared by the
    requests of that path; Django hands views and middleware its arguments
    as copies (``**kwargs``). A path that resolves to nothing raises every
    time and is not kept; the cache is bounded, so paths that vary (a room's
    slug) only evict one another. A new URLconf (``clear_url_caches``, a test
    that overrides ``ROOT_URLCONF``) is a new resolver, and so new entries.
    """

    def resolve_request(self, request):
        if hasattr(request, "urlconf"):  # set by a middleware: Django's own way
            return super().resolve_request(request)
        match = _resolved(get_resolver(), request.path_info)
        request.resolver_match = match
        return match


# As django.core.wsgi.get_wsgi_application, with the handler above.
django.setup(set_prefix=False)
django_application = _Handler()


_BAD_CONTENT_TYPE = ("400 Bad Request", "bad_request", "The Content-Type header is malformed.")
_UNREADABLE_BODY = ("400 Bad Request", "bad_request", "The request body could not be read.")
_TOO_LARGE = (
    "413 Request Entity Too Large",
    "request_too_large",
    "The request body is larger than the server accepts.",
)


def _refuse(start_response, refusal: tuple[str, str, str], path: str) -> list[bytes]:
    status, code, message = refusal
    answer = refused_before_reading(path, int(status.split()[0]), code, message)
    body = json.dumps(answer).encode()
    start_response(
        status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    )
    return [body]


def application(environ, start_response):
    """Django's WSGI app, behind the process's request gate (common/gate.py).

    ``make serve`` runs it behind ``plumb_site/asgi.py``, which has read the
    whole body already. Under a plain WSGI server the same rules hold here: a
    declared body past the size limit is refused unread, and the body is read
    off the socket before the gate is taken, so a slow client holds only its
    own thread, never the process's turn. A NUL in the Content-Type
    header makes Django fail while it builds the request, before any
    middleware can answer; it is refused here in the API's error shape
    instead of a plain-text 500.
    """
    if "\x00" in environ.get("CONTENT_TYPE", ""):
        return _refuse(start_response, _BAD_CONTENT_TYPE, environ.get("PATH_INFO", ""))
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0  # as Django reads it
    if length > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
        return _refuse(start_response, _TOO_LARGE, environ.get("PATH_INFO", ""))
    if length > 0:
        try:
            environ["wsgi.input"] = io.BytesIO(environ["wsgi.input"].read(length))
        except OSError:
            return _refuse(start_response, _UNREADABLE_BODY, environ.get("PATH_INFO", ""))
    with gate().admitted():
        return django_application(environ, start_response)
