"""Django's browser middleware runs for the admin and is skipped on the paths agents call
(``plumb_site/middleware.py``: ``_BrowserOnly``)."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.http import HttpResponse
from django.test import RequestFactory

from plumb_site import middleware

BROWSER_ONLY = [
    middleware.SessionMiddleware,
    middleware.AuthenticationMiddleware,
    middleware.MessageMiddleware,
]


def seen_by_the_view(path: str) -> set[str]:
    """What the browser middleware left on a request to ``path``."""
    seen: set[str] = set()

    def view(request):
        seen.update(a for a in ("session", "user", "_messages") if hasattr(request, a))
        return HttpResponse()

    chain = view
    for cls in reversed(BROWSER_ONLY):
        chain = cls(chain)
    chain(RequestFactory().get(path))
    return seen


def test_the_settings_name_the_browser_only_middleware_in_djangos_order():
    names = [f"plumb_site.middleware.{cls.__name__}" for cls in BROWSER_ONLY]
    assert [m for m in settings.MIDDLEWARE if m in names] == names


@pytest.mark.parametrize(
    "path",
    ["/api/v1/sessions/current/", "/api/v1/rooms/r/messages/", "/mcp", "/healthz", "/metrics"],
)
def test_paths_agents_call_get_no_session_user_or_messages(path):
    assert seen_by_the_view(path) == set()


@pytest.mark.parametrize("path", ["/admin/", "/admin/login/", "/"])
def test_the_admin_and_the_home_page_get_them(path):
    assert seen_by_the_view(path) == {"session", "user", "_messages"}


def test_the_admin_logs_in_and_shows_its_index(admin_client):
    response = admin_client.get("/admin/")
    assert response.status_code == 200
    assert response.wsgi_request.user.is_staff
