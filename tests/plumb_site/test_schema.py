"""The OpenAPI document, the offline docs and the schema fingerprint (SPEC §2)."""

import pytest
from django.urls import include, path, re_path
from rest_framework.response import Response

import plumb_site.urls
from common.schema import reset_schema_fingerprint, schema_fingerprint
from mailbox.api.base import PlumbApiView

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_fingerprint():
    reset_schema_fingerprint()
    yield
    reset_schema_fingerprint()


def test_schema_is_served_as_openapi_json(client):
    response = client.get("/api/v1/schema/")

    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"].startswith("3.")
    assert "/api/v1/sessions/" in schema["paths"]
    error = schema["components"]["schemas"]["Error"]
    assert "error" in error["properties"]


def test_every_operation_documents_its_error_responses(client):
    schema = client.get("/api/v1/schema/").json()

    for path_name, item in schema["paths"].items():
        for method, operation in item.items():
            statuses = set(operation["responses"])
            assert "405" in statuses, (path_name, method)
            if operation.get("security"):
                assert {"401", "429"} <= statuses, (path_name, method)


def test_docs_are_served_without_any_external_host(client):
    response = client.get("/api/v1/docs/")

    assert response.status_code == 200
    html = response.content.decode()
    assert "swagger-ui" in html
    for host in ("cdn.jsdelivr.net", "unpkg.com", "cdnjs.cloudflare.com", "//fonts."):
        assert host not in html


def test_fingerprint_endpoint_returns_the_current_fingerprint(client):
    response = client.get("/api/v1/schema/fingerprint/")

    assert response.status_code == 200
    assert response.json() == {"fingerprint": schema_fingerprint()}
    assert len(schema_fingerprint()) == 16


class _ExtraApi(PlumbApiView):
    authentication_classes: list = []
    permission_classes: list = []

    def get(self, request):
        return Response({})


urlpatterns = [
    re_path(r"^api/v1/extra/?$", _ExtraApi.as_view()),
    path("", include(plumb_site.urls)),
]


def test_fingerprint_changes_when_the_published_schema_changes(client, settings):
    before = client.get("/api/v1/schema/fingerprint/").json()["fingerprint"]

    settings.ROOT_URLCONF = __name__
    reset_schema_fingerprint()
    after = client.get("/api/v1/schema/fingerprint/").json()["fingerprint"]

    assert after != before
    assert "/api/v1/extra/" in client.get("/api/v1/schema/").json()["paths"]


@pytest.mark.parametrize("where", ["query", "header"])
def test_a_stale_fingerprint_is_reported_without_blocking_the_call(session_client, where):
    kwargs = (
        {"data": {"tool_schema_fingerprint": "0000"}}
        if where == "query"
        else {"HTTP_PLUMB_SCHEMA_FINGERPRINT": "0000"}
    )

    response = session_client.get("/api/v1/sessions/current/", **kwargs)

    assert response.status_code == 200
    assert response.json()["schema_stale"] == {"current": schema_fingerprint()}
    assert response.json()["session"]["name"] == "alice"


def test_a_stale_fingerprint_in_the_body_is_reported(key_client, workspace):
    response = key_client.post(
        "/api/v1/sessions/",
        {"workspace": "main", "tool_schema_fingerprint": "0000"},
        format="json",
    )

    assert response.status_code == 201
    assert response.json()["schema_stale"] == {"current": schema_fingerprint()}


def test_a_current_fingerprint_adds_nothing(session_client):
    response = session_client.get(
        "/api/v1/sessions/current/", HTTP_PLUMB_SCHEMA_FINGERPRINT=schema_fingerprint()
    )

    assert response.status_code == 200
    assert "schema_stale" not in response.json()


def test_no_fingerprint_adds_nothing(session_client):
    assert "schema_stale" not in session_client.get("/api/v1/sessions/current/").json()
