"""Django's browser middleware runs for the admin and is skipped on the paths agents call
(``plumb_site/middleware.py``: ``_BrowserOnly``)."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.http import HttpResponse
from django.test import RequestFactory
from django.urls import URLResolver, get_resolver

from plumb_site import middleware

BROWSER_ONLY = [
    middleware.SessionMiddleware,
    middleware.CsrfViewMiddleware,
    middleware.AuthenticationMiddleware,
    middleware.MessageMiddleware,
]
API_PATHS = [
    "/api/v1/sessions/current/",
    "/api/v1/rooms/r/messages/",
    "/mcp",
    "/healthz",
    "/metrics",
]


def seen_by_the_view(path: str) -> set[str]:
    """What the browser middleware left on a request to ``path``."""
    seen: set[str] = set()

    def view(request):
        seen.update(a for a in ("session", "user", "_messages") if hasattr(request, a))
        seen.update(k for k in ("CSRF_COOKIE",) if k in request.META)
        return HttpResponse()

    chain = view
    for cls in reversed(BROWSER_ONLY):
        chain = cls(chain)
    request = RequestFactory().get(path)
    request.COOKIES[settings.CSRF_COOKIE_NAME] = "a" * 32
    chain(request)
    return seen


def test_the_settings_name_the_browser_only_middleware_in_djangos_order():
    names = [f"plumb_site.middleware.{cls.__name__}" for cls in BROWSER_ONLY]
    assert [m for m in settings.MIDDLEWARE if m in names] == names


@pytest.mark.parametrize("path", API_PATHS)
def test_paths_agents_call_get_no_session_user_messages_or_csrf_cookie(path):
    assert seen_by_the_view(path) == set()


@pytest.mark.parametrize("path", ["/admin/", "/admin/login/", "/"])
def test_the_admin_and_the_home_page_get_them(path):
    assert seen_by_the_view(path) == {"session", "user", "_messages", "CSRF_COOKIE"}


def _api_views(resolver=None, prefix=""):
    """(route, view) of every URL pattern agents call."""
    for pattern in (resolver or get_resolver()).url_patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            yield from _api_views(pattern, route)
        elif middleware.is_api_path("/" + route.lstrip("^")):
            yield route, pattern.callback


def test_every_view_on_the_paths_agents_call_is_csrf_exempt():
    """What lets those paths skip the CSRF middleware: no view there relies on it."""
    views = list(_api_views())
    routes = " ".join(route for route, view in views)
    for named in ("healthz", "metrics", "mcp", "^notes/", "/messages/", "^docs/"):
        assert named in routes
    assert [route for route, view in views if not getattr(view, "csrf_exempt", False)] == []


@pytest.mark.parametrize("path", API_PATHS)
def test_django_common_middleware_only_checks_the_host_on_paths_agents_call(path, settings):
    settings.PREPEND_WWW = True  # would redirect a browser's request to www.
    answered = HttpResponse("x")
    chain = middleware.CommonMiddleware(lambda request: answered)

    assert chain(RequestFactory().get(path, HTTP_HOST="localhost")) is answered
    assert not answered.has_header("Content-Length")  # the front states it
    with pytest.raises(DisallowedHost):
        chain(RequestFactory().get(path, HTTP_HOST="evil.example"))


def test_django_common_middleware_keeps_its_rules_elsewhere(settings):
    settings.PREPEND_WWW = True
    chain = middleware.CommonMiddleware(lambda request: HttpResponse("x"))

    response = chain(RequestFactory().get("/admin/login/", HTTP_HOST="localhost"))

    assert response.status_code == 301
    assert response["Location"] == "http://www.localhost/admin/login/"


def test_the_admin_logs_in_and_shows_its_index(admin_client):
    response = admin_client.get("/admin/")
    assert response.status_code == 200
    assert response.wsgi_request.user.is_staff
