"""Helpers for tests that talk to a live server over real sockets."""

import json
import urllib.error
import urllib.request

REQUEST_TIMEOUT = 60  # seconds; above SQLite's 30 s busy timeout, so a lock wait shows as such
BARRIER_TIMEOUT = 20


def call(method: str, url: str, *, token: str | None = None, body: dict | None = None) -> tuple:
    """One HTTP request with the stdlib; returns ``(status, json)`` for errors too."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Accept", "application/json")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def no_rate_limits(settings) -> None:
    settings.PLUMB_RATE_SESSION = None
    settings.PLUMB_RATE_KEY = None


def error_code(body: dict) -> str | None:
    return body.get("error", {}).get("code")
