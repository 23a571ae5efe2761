"""The WSGI handler resolves each path once (``plumb_site/wsgi.py``), with Django's answers."""

from __future__ import annotations

import io
import json

import pytest
from django.test import RequestFactory
from django.urls import Resolver404, get_resolver

from plumb_site import wsgi


@pytest.fixture
def handler():
    wsgi._resolved.cache_clear()
    yield wsgi.django_application
    wsgi._resolved.cache_clear()


def resolve(handler, path):
    request = RequestFactory().get(path)
    match = handler.resolve_request(request)
    assert request.resolver_match is match
    return match


def test_a_path_resolves_as_django_resolves_it_and_once(handler):
    first = resolve(handler, "/api/v1/rooms/ops/messages/")
    again = resolve(handler, "/api/v1/rooms/ops/messages/")

    expected = get_resolver().resolve("/api/v1/rooms/ops/messages/")
    assert (first.url_name, first.args, first.kwargs) == ("room-messages", (), {"slug": "ops"})
    assert first.func.view_class is expected.func.view_class
    assert again is first
    assert wsgi._resolved.cache_info().misses == 1


def test_each_path_keeps_its_own_arguments(handler):
    ops = resolve(handler, "/api/v1/rooms/ops/messages/")
    lab = resolve(handler, "/api/v1/rooms/lab/messages/")

    assert (ops.kwargs, lab.kwargs) == ({"slug": "ops"}, {"slug": "lab"})


def test_an_unknown_path_is_refused_every_time_and_not_kept(handler):
    for _ in range(2):
        with pytest.raises(Resolver404):
            resolve(handler, "/api/v1/no-such-thing/")

    assert wsgi._resolved.cache_info().currsize == 0


def test_a_request_with_its_own_urlconf_resolves_djangos_way(handler):
    request = RequestFactory().get("/healthz")
    request.urlconf = "plumb_site.urls"

    match = handler.resolve_request(request)

    assert match.url_name == "healthz"
    assert wsgi._resolved.cache_info().currsize == 0


@pytest.mark.django_db(transaction=True)  # the request's end closes the connection
def test_the_floor_answers_through_the_application_twice(agent_session):
    status, body = _get("/api/v1/sessions/current/", agent_session.raw_token)
    again, _ = _get("/api/v1/sessions/current/", agent_session.raw_token)

    assert (status, again) == (200, 200)
    assert body["session"]["name"] == "alice"


def _get(path, token):
    captured = {}

    def start_response(status, headers):
        captured["status"] = int(status.split()[0])

    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "SERVER_NAME": "testserver",
        "SERVER_PORT": "80",
        "HTTP_HOST": "testserver",
        "HTTP_AUTHORIZATION": f"Bearer {token}",
        "wsgi.input": io.BytesIO(),
        "wsgi.url_scheme": "http",
        "wsgi.errors": io.StringIO(),
    }
    response = wsgi.application(environ, start_response)
    try:
        content = b"".join(response)
    finally:
        response.close()
    return captured["status"], json.loads(content)
