import json
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "plumb_site.settings")

django_application = get_wsgi_application()

_BAD_CONTENT_TYPE = json.dumps(
    {
        "error": {
            "code": "bad_request",
            "message": "The Content-Type header is malformed.",
            "details": {},
        }
    }
).encode()


def application(environ, start_response):
    """Django's WSGI app, behind one guard.

    A NUL in the Content-Type header makes Django fail while it builds the
    request, before any middleware can answer; refuse it here in the API's
    error shape instead of a plain-text 500.
    """
    if "\x00" in environ.get("CONTENT_TYPE", ""):
        start_response(
            "400 Bad Request",
            [("Content-Type", "application/json"), ("Content-Length", str(len(_BAD_CONTENT_TYPE)))],
        )
        return [_BAD_CONTENT_TYPE]
    return django_application(environ, start_response)
