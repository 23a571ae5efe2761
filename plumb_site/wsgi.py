import io
import json
import os

from django.conf import settings
from django.core.wsgi import get_wsgi_application

from common.gate import gate
from plumb_site.mcp.jsonrpc import refused_before_reading

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "plumb_site.settings")

django_application = get_wsgi_application()


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
