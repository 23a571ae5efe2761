"""Every operation in the published schema answers malformed input with the
one error shape: this walks the schema, so a new endpoint is covered the day
it is added."""

import json
import re

import pytest
from django.test import Client

from mailbox.models import Note, Session
from rooms.models import Event
from tests.conftest import assert_error, client_for
from tests.factories import SessionFactory

pytestmark = pytest.mark.django_db

ERROR_CODE = re.compile(r"^[a-z][a-z0-9_]*$")


def _schema() -> dict:
    from drf_spectacular.generators import SchemaGenerator

    return SchemaGenerator().get_schema(request=None, public=True)


SCHEMA = _schema()
OPERATIONS = [
    (path, method.upper(), operation)
    for path, item in SCHEMA["paths"].items()
    for method, operation in item.items()
]


def _has_required_fields(operation: dict) -> bool:
    ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    return bool(SCHEMA["components"]["schemas"][ref.rsplit("/", 1)[-1]].get("required"))


BODY_OPERATIONS = [
    (path, method) for path, method, op in OPERATIONS if "requestBody" in op and method == "POST"
]
SESSION_OPERATIONS = [
    (path, method)
    for path, method, op in OPERATIONS
    if op.get("security") == [{"sessionToken": []}]
]


@pytest.fixture
def world(workspace, agent_session, session_client):
    """A room with a message, so that every path parameter names something real."""
    response = session_client.post("/api/v1/rooms/", {"slug": "dev"}, format="json")
    assert response.status_code == 201
    sent = session_client.post("/api/v1/rooms/dev/messages/", {"body": "hello"}, format="json")
    left = session_client.post("/api/v1/notes/", {"body": "to the next"}, format="json")
    return {
        "slug": "dev",
        "message_id": sent.json()["message"]["id"],
        "conversation_id": left.json()["conversation_id"],
    }


def _fill(path: str, world: dict) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: world[m.group(1)], path)


def _auth_for(path: str, project_key, agent_session) -> str:
    if path.rstrip("/") == "/api/v1/sessions":
        return f"Bearer {project_key.raw_key}"
    return f"Bearer {agent_session.raw_token}"


def _stored() -> tuple[int, int, int]:
    return Session.objects.count(), Note.objects.count(), Event.objects.count()


MALFORMED = [
    ("truncated json", b'{"body": ', "application/json", 400, "invalid_json"),
    ("array", b"[1, 2]", "application/json", 400, "invalid_json"),
    ("bare string", b'"hello"', "application/json", 400, "invalid_json"),
    ("invalid utf-8", b'{"body": "\xff\xfe"}', "application/json", 400, "invalid_json"),
    ("nan", b'{"body": NaN}', "application/json", 400, "invalid_json"),
    ("lone surrogate", b'{"body": "\\ud800"}', "application/json", 400, "invalid_json"),
    (
        "deep nesting",
        b'{"x": ' + b"[" * 200 + b"]" * 200 + b"}",
        "application/json",
        400,
        "invalid_json",
    ),
    ("text/plain", b'{"body": "x"}', "text/plain", 415, "unsupported_media_type"),
    ("form", b"body=x", "application/x-www-form-urlencoded", 415, "unsupported_media_type"),
    (
        "latin-1",
        b'{"body": "x"}',
        "application/json; charset=latin-1",
        415,
        "unsupported_media_type",
    ),
]


@pytest.mark.parametrize(("path", "method"), BODY_OPERATIONS)
@pytest.mark.parametrize(
    ("case", "payload", "content_type", "status", "code"),
    MALFORMED,
    ids=[case[0] for case in MALFORMED],
)
def test_every_body_endpoint_refuses_malformed_bodies_and_stores_nothing(
    world, project_key, agent_session, path, method, case, payload, content_type, status, code
):
    before = _stored()

    response = Client().generic(
        method,
        _fill(path, world),
        data=payload,
        content_type=content_type,
        HTTP_AUTHORIZATION=_auth_for(path, project_key, agent_session),
    )

    assert_error(response, status, code)
    assert _stored() == before


@pytest.mark.parametrize(("path", "method"), BODY_OPERATIONS)
def test_every_body_endpoint_refuses_an_oversized_body(
    world, project_key, agent_session, settings, path, method
):
    payload = json.dumps({"body": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 10)})
    before = _stored()

    response = Client().generic(
        method,
        _fill(path, world),
        data=payload,
        content_type="application/json",
        HTTP_AUTHORIZATION=_auth_for(path, project_key, agent_session),
    )

    assert_error(response, 413, "request_too_large")
    assert _stored() == before


@pytest.mark.parametrize(
    ("path", "method"),
    [
        (path, method)
        for path, method, op in OPERATIONS
        if (path, method) in BODY_OPERATIONS and _has_required_fields(op)
    ],
)
def test_every_body_endpoint_names_the_fields_of_an_empty_object(
    world, project_key, agent_session, path, method
):
    response = Client().generic(
        method,
        _fill(path, world),
        data=b"{}",
        content_type="application/json",
        HTTP_AUTHORIZATION=_auth_for(path, project_key, agent_session),
    )

    error = assert_error(response, 400, "validation_error")
    assert error["details"]


@pytest.mark.parametrize(("path", "method"), BODY_OPERATIONS)
def test_every_body_endpoint_refuses_an_unknown_field_and_publishes_that(
    world, project_key, agent_session, path, method
):
    """SPEC §2: an unknown body field is named in the details, and the schema says
    ``additionalProperties: false`` so that clients can check before they send."""
    operation = SCHEMA["paths"][path][method.lower()]
    ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert SCHEMA["components"]["schemas"][ref.rsplit("/", 1)[-1]]["additionalProperties"] is False
    before = _stored()

    response = Client().generic(
        method,
        _fill(path, world),
        data=json.dumps({"requireRead": True}),
        content_type="application/json",
        HTTP_AUTHORIZATION=_auth_for(path, project_key, agent_session),
    )

    error = assert_error(response, 400, "validation_error")
    assert error["details"]["requireRead"] == ["Unknown field."]
    assert _stored() == before


@pytest.mark.parametrize(("path", "method"), SESSION_OPERATIONS)
@pytest.mark.parametrize(
    ("authorization", "code"),
    [
        (None, "not_authenticated"),
        ("Bearer nonsense", "invalid_token"),
        ("Basic YWxhZGRpbjpvcGVuc2VzYW1l", "invalid_token"),
    ],
)
def test_every_session_endpoint_refuses_bad_credentials(world, path, method, authorization, code):
    headers = {"HTTP_AUTHORIZATION": authorization} if authorization else {}

    response = Client().generic(
        method, _fill(path, world), data=b"{}", content_type="application/json", **headers
    )

    assert_error(response, 401, code)


@pytest.mark.parametrize(("path", "method"), SESSION_OPERATIONS)
def test_every_session_endpoint_refuses_an_ended_session(world, agent_session, path, method):
    from mailbox import services

    services.session_end(agent_session)

    response = Client().generic(
        method,
        _fill(path, world),
        data=b"{}",
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {agent_session.raw_token}",
    )

    assert_error(response, 401, "session_ended")


@pytest.mark.parametrize(("path", "method", "operation"), OPERATIONS)
def test_every_path_refuses_a_method_it_does_not_document(
    world, project_key, agent_session, path, method, operation
):
    documented = {m for p, m, _ in OPERATIONS if p == path}
    unused = next(m for m in ("PUT", "PATCH", "DELETE", "POST", "GET") if m not in documented)

    response = Client().generic(
        unused,
        _fill(path, world),
        data=b"{}",
        content_type="application/json",
        HTTP_AUTHORIZATION=_auth_for(path, project_key, agent_session),
    )

    assert_error(response, 405, "method_not_allowed")
    assert unused not in response["Allow"]


@pytest.mark.parametrize(("path", "method"), SESSION_OPERATIONS)
def test_every_session_endpoint_answers_json_to_a_browser(world, agent_session, path, method):
    response = Client().generic(
        method,
        _fill(path, world),
        data=b"{}",
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {agent_session.raw_token}",
        HTTP_ACCEPT="text/html",
    )

    assert response["Content-Type"].startswith("application/json")
    assert isinstance(json.loads(response.content), dict)


def test_a_member_of_another_project_gets_json_errors_everywhere(world, agent_session):
    outsider = SessionFactory(name="outsider")
    client = client_for(outsider)

    for path, method in SESSION_OPERATIONS:
        response = client.generic(
            method, _fill(path, world), data=b"{}", content_type="application/json"
        )
        assert response["Content-Type"].startswith("application/json"), path
        assert response.status_code < 500, path
