"""GET /healthz (SPEC §7)."""

import pytest
from django.db import OperationalError

pytestmark = pytest.mark.django_db


def test_healthz_answers_ok_while_the_database_answers(client):
    response = client.get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_healthz_answers_503_when_the_database_does_not(client, monkeypatch):
    def broken_cursor(*args, **kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr("plumb_site.views.connection.cursor", broken_cursor)

    response = client.get("/healthz")

    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["error"]["code"] == "database_unavailable"


def test_healthz_needs_no_authentication(client):
    response = client.get("/healthz", HTTP_AUTHORIZATION="Bearer nonsense")

    assert response.status_code == 200


def test_healthz_answers_head_and_refuses_other_methods_in_the_error_shape(client):
    assert client.head("/healthz").status_code == 200

    response = client.post("/healthz", {}, content_type="application/json")

    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"
    assert response["Allow"] == "GET, HEAD"
