"""GET / points a newcomer to the docs, the admin and health, instead of a bare "Not Found"."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db

LINKS = ["/api/v1/docs/", "/admin/", "/healthz"]


def test_a_browser_gets_a_short_page_with_the_three_links(client):
    response = client.get("/", HTTP_ACCEPT="text/html")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    page = response.content.decode()
    for link in LINKS:
        assert f'href="{link}"' in page


def test_a_json_client_gets_the_same_links_as_json(client):
    response = client.get("/", HTTP_ACCEPT="application/json")

    assert response.status_code == 200
    assert [link["href"] for link in response.json()["links"]] == LINKS


def test_other_methods_are_refused_with_the_json_error_shape(client):
    response = client.post("/", {})

    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"
