import io
import json
import os

from django.conf import settings
from django.core.wsgi import get_wsgi_application

from common.errors import error_body
from common.gate import gate

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "plumb_site.settings")

django_application = get_wsgi_application()


def _error(status: str, message: str, *, code: str = "bad_request") -> tuple[str, bytes]:
    return status, json.dumps(error_body(code, message)).encode()


_BAD_CONTENT_TYPE = _error("400 Bad Request", "The Content-Type header is malformed.")
_UNREADABLE_BODY = _error("400 Bad Request", "The request body could not be read.")
_TOO_LARGE = _error(
    "413 Request Entity Too Large",
    "The request body is larger than the server accepts.",
    code="request_too_large",
)


def _refuse(start_response, refusal: tuple[str, bytes]) -> list[bytes]:
    status, body = refusal
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
        return _refuse(start_response, _BAD_CONTENT_TYPE)
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0  # as Django reads it
    if length > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
        return _refuse(start_response, _TOO_LARGE)
    if length > 0:
        try:
            environ["wsgi.input"] = io.BytesIO(environ["wsgi.input"].read(length))
        except OSError:
            return _refuse(start_response, _UNREADABLE_BODY)
    with gate().admitted():
        return django_application(environ, start_response)
