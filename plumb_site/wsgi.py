import io
import json
import os

from django.conf import settings
from django.core.wsgi import get_wsgi_application

from common.gate import gate

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "plumb_site.settings")

django_application = get_wsgi_application()


def _error(status: str, message: str) -> tuple[str, bytes]:
    body = json.dumps({"error": {"code": "bad_request", "message": message, "details": {}}})
    return status, body.encode()


_BAD_CONTENT_TYPE = _error("400 Bad Request", "The Content-Type header is malformed.")
_UNREADABLE_BODY = _error("400 Bad Request", "The request body could not be read.")


def _refuse(start_response, refusal: tuple[str, bytes]) -> list[bytes]:
    status, body = refusal
    start_response(
        status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    )
    return [body]


def application(environ, start_response):
    """Django's WSGI app, behind the process's request gate (common/gate.py).

    The body is read off the socket before the gate is taken, so a slow
    client holds only its own thread, never the process's turn; a body past
    the size limit is left for the API to refuse. A NUL in the Content-Type
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
    if 0 < length <= settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
        try:
            environ["wsgi.input"] = io.BytesIO(environ["wsgi.input"].read(length))
        except OSError:
            return _refuse(start_response, _UNREADABLE_BODY)
    with gate().admitted():
        return django_application(environ, start_response)
