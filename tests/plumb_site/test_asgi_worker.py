"""The asgi worker's own rules (plumb_site/asgi_worker.py), without a server:
the 499 of the access log.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from plumb_site import asgi_worker

# --- what gunicorn logs -------------------------------------------------------------------------


def access_logged(status: int, headers: list, closed: bool) -> int:
    logged = []
    gunicorn_log = SimpleNamespace(access=lambda resp, *_: logged.append(resp.status))
    connection = SimpleNamespace(_closed=closed)
    log = asgi_worker._ConnectionLog(gunicorn_log, connection)

    log.access(SimpleNamespace(status=status, headers=headers), None, {}, None)

    return logged[0]


def test_a_request_whose_client_left_unanswered_is_logged_499():
    assert access_logged(500, [], closed=True) == 499


@pytest.mark.parametrize(
    ("status", "headers", "closed"),
    [
        pytest.param(500, [], False, id="the-application-answered-nothing"),
        pytest.param(500, [("content-type", "application/json")], True, id="a-500-it-sent"),
        pytest.param(200, [("content-type", "application/json")], True, id="answered-then-gone"),
    ],
)
def test_any_other_request_is_logged_as_it_was_answered(status, headers, closed):
    assert access_logged(status, headers, closed) == status
