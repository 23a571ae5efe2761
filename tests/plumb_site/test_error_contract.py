"""The error contract of SPEC §2, checked against every endpoint that exists.

Every refusal is ``{"error": {"code", "message", "details"}}`` served as JSON,
with a stable snake_case code: never Django's HTML pages, never a 500 for a
bad request. The one acceptable 500 is a bug inside a view, and even that is
JSON. Refused requests store nothing.
"""

import json
import re
import secrets

import pytest
from django.conf import settings as django_settings
from django.core.cache import cache
from django.test import Client

from mailbox import services
from mailbox.models import AgentName, Session
from plumb_site.settings import env_rate
from tests.conftest import assert_error

pytestmark = pytest.mark.django_db

START = "/api/v1/sessions/"
CURRENT = "/api/v1/sessions/current/"
FINGERPRINT = "/api/v1/schema/fingerprint/"
REALM = 'Bearer realm="plumb"'
SNAKE_CASE = re.compile(r"^[a-z][a-z0-9_]*$")

# (method, path, fixture providing a client that is allowed to call it)
ENDPOINTS = [
    pytest.param("POST", START, "key_client", id="session-start"),
    pytest.param("GET", CURRENT, "session_client", id="session-current"),
    pytest.param("DELETE", CURRENT, "session_client", id="session-end"),
    pytest.param("GET", FINGERPRINT, "api_client", id="schema-fingerprint"),
]
AUTHENTICATED_ENDPOINTS = ENDPOINTS[:3]
SESSION_ENDPOINTS = ENDPOINTS[1:3]
# Endpoints that read no request body; the fingerprint view reads none either.
BODYLESS_ENDPOINTS = ENDPOINTS[1:]
VALID_START_BODY = {"workspace": "main"}


@pytest.fixture(autouse=True)
def _fresh_throttle_counters():
    """Throttle counters live in the process-wide locmem cache, which outlives a test."""
    cache.clear()
    yield
    cache.clear()


def stored() -> tuple[int, int]:
    """What a refused session start must not change: sessions and claimed names."""
    return Session.objects.count(), AgentName.objects.count()


def call(client, method: str, path: str, body: bytes = b"", content_type: str = "", **extra):
    """Send raw bytes, so the test controls exactly what the parser sees."""
    return client.generic(
        method, path, data=body, content_type=content_type or "application/json", **extra
    )


def unknown_credential(kind: str) -> str:
    """Right format, random prefix and secret: parses, but matches no row."""
    prefix = "".join(secrets.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(8))
    return f"plumb_{kind}_{prefix}_{secrets.token_urlsafe(32)}"


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# --- request bodies ---------------------------------------------------------------------------

MALFORMED_BODIES = [
    pytest.param(b'{"workspace":', id="truncated"),
    pytest.param(b'{"workspace": "main"} trailing', id="trailing-garbage"),
    pytest.param(b"{'workspace': 'main'}", id="single-quotes"),
    pytest.param(b'[{"workspace": "main"}]', id="array"),
    pytest.param(b'"main"', id="string"),
    pytest.param(b"42", id="number"),
    pytest.param(b"true", id="boolean"),
    pytest.param(b"null", id="null"),
    pytest.param(b'{"workspace": "\xff\xfe"}', id="invalid-utf8"),
    pytest.param(b'\xef\xbb\xbf{"workspace": "main"}', id="utf8-bom"),
    pytest.param(b'{"workspace": "main", "x": NaN}', id="nan"),
    pytest.param(b'{"workspace": "main", "x": Infinity}', id="infinity"),
    pytest.param(b'{"workspace": "main", "x": -Infinity}', id="minus-infinity"),
    pytest.param(b'{"workspace": "main", "x": 1e400}', id="number-overflowing-to-infinity"),
    pytest.param(
        ('{"workspace": "main", "x": ' + nested(100) + "}").encode(), id="nested-100-arrays"
    ),
    pytest.param(
        ('{"workspace": "main", "x": ' + '{"a": ' * 100 + "1" + "}" * 100 + "}").encode(),
        id="nested-100-objects",
    ),
    pytest.param(
        ('{"workspace": "main", "x": ' + nested(50_000) + "}").encode(),
        id="nested-past-the-recursion-limit",
    ),
    pytest.param(b'{"workspace": "main", "name": "\\ud800"}', id="lone-surrogate-value"),
    pytest.param(b'{"workspace": "main", "\\udfff": 1}', id="lone-surrogate-key"),
    pytest.param(b'{"workspace": "main", "x": ["\\ud800"]}', id="lone-surrogate-in-list"),
]


@pytest.mark.parametrize("body", MALFORMED_BODIES)
def test_a_body_that_is_not_a_clean_json_object_is_refused_with_invalid_json(
    key_client, workspace, body
):
    # Each body would start a session if the parser let it through: "main" exists.
    before = stored()
    response = call(key_client, "POST", START, body)

    assert_error(response, 400, "invalid_json")
    assert stored() == before


@pytest.mark.parametrize(
    "body", [pytest.param(b"", id="empty"), pytest.param(b" \n", id="whitespace"), b"{}"]
)
def test_a_post_without_fields_is_refused_with_validation_error_naming_workspace(
    key_client, workspace, body
):
    before = stored()
    response = call(key_client, "POST", START, body)

    error = assert_error(response, 400, "validation_error")
    assert set(error["details"]) == {"workspace"}
    assert stored() == before


def test_a_post_with_no_body_and_no_content_type_names_workspace(key_client, workspace):
    before = stored()
    response = key_client.post(START)

    error = assert_error(response, 400, "validation_error")
    assert set(error["details"]) == {"workspace"}
    assert stored() == before


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        pytest.param(b'{"workspace":', "application/json", id="malformed-json"),
        pytest.param(b"[1, 2]", "application/json", id="json-array"),
        pytest.param(b'{"x": "\xff"}', "application/json", id="invalid-utf8"),
        pytest.param(b"workspace=main", "text/plain", id="text-plain"),
        pytest.param(b"workspace=main", "application/x-www-form-urlencoded", id="form"),
    ],
)
@pytest.mark.parametrize(("method", "path", "client_fixture"), BODYLESS_ENDPOINTS)
def test_endpoints_that_read_no_body_ignore_a_malformed_one(
    request, method, path, client_fixture, body, content_type
):
    """GET and DELETE take no body, so a body they cannot parse is ignored, not refused.

    Refusing it would make the same call succeed or fail depending on bytes the
    endpoint has no use for; ignoring it keeps GET/DELETE semantics and still keeps
    the contract (no 500, no HTML): the call succeeds with its normal JSON. (A JSON
    object sent to DELETE is read, for its fingerprint, so an unknown field in it
    is refused: see test_unknown_fields.py.)
    """
    client = request.getfixturevalue(client_fixture)

    response = call(client, method, path, body, content_type)

    assert response.status_code == 200, response.content[:500]
    assert response["Content-Type"] == "application/json"
    assert "error" not in response.json()


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        pytest.param(b'{"workspace": "main"}', "text/plain", id="text-plain"),
        pytest.param(b"workspace=main", "application/x-www-form-urlencoded", id="form"),
        pytest.param(
            b'--XyZ\r\nContent-Disposition: form-data; name="workspace"\r\n\r\nmain\r\n--XyZ--\r\n',
            "multipart/form-data; boundary=XyZ",
            id="multipart",
        ),
        pytest.param(b'{"workspace": "main"}', "application/octet-stream", id="octet-stream"),
        pytest.param(b"<workspace>main</workspace>", "application/xml", id="xml"),
    ],
)
def test_a_body_that_is_not_json_is_refused_with_unsupported_media_type(
    key_client, workspace, body, content_type
):
    before = stored()
    response = call(key_client, "POST", START, body, content_type)

    assert_error(response, 415, "unsupported_media_type")
    assert stored() == before


def test_multipart_sent_by_the_test_client_is_refused_with_unsupported_media_type(
    key_client, workspace
):
    before = stored()
    response = key_client.post(START, VALID_START_BODY, format="multipart")

    assert_error(response, 415, "unsupported_media_type")
    assert stored() == before


@pytest.mark.parametrize(
    "charset", ["utf-16", "rot13", "zlib", "bz2", "hex", "base64", "uu", "punycode", "undefined"]
)
def test_a_charset_other_than_utf8_is_refused_with_unsupported_media_type(
    key_client, workspace, charset
):
    # The charset parameter is the client's to choose; it must not pick the
    # server's decoder (a non-text codec here used to end in a 500).
    before = stored()
    response = call(
        key_client,
        "POST",
        START,
        b'{"workspace": "main"}',
        f"application/json; charset={charset}",
    )

    assert_error(response, 415, "unsupported_media_type")
    assert stored() == before


@pytest.mark.parametrize("charset", ["utf-8", "UTF-8", "utf8"])
def test_a_json_body_declared_as_utf8_is_accepted(key_client, workspace, charset):
    response = call(
        key_client, "POST", START, b'{"workspace": "main"}', f"application/json; charset={charset}"
    )

    assert response.status_code == 201, response.content[:500]


def test_a_body_over_the_upload_limit_is_refused_with_request_too_large(key_client, workspace):
    limit = django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    # A valid request in every other respect: only its size is wrong. The padding
    # is whitespace, as a field of its own would be refused as unknown (SPEC §2).
    body = json.dumps({"workspace": "main", "name": "bob"}).encode() + b" " * limit
    assert len(body) > limit

    before = stored()
    response = call(key_client, "POST", START, body)

    assert_error(response, 413, "request_too_large")
    assert stored() == before


def test_a_body_just_under_the_upload_limit_is_accepted(key_client, workspace):
    limit = django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    start = json.dumps({"workspace": "main"}).encode()
    body = start + b" " * (limit - len(start))
    assert len(body) == limit

    response = call(key_client, "POST", START, body)

    assert response.status_code == 201, response.content[:500]


# --- field validation -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        pytest.param({"workspace": 5}, "workspace", id="workspace-int"),
        pytest.param({"workspace": 1.5}, "workspace", id="workspace-float"),
        pytest.param({"workspace": True}, "workspace", id="workspace-bool"),
        pytest.param({"workspace": None}, "workspace", id="workspace-null"),
        pytest.param({"workspace": ["main"]}, "workspace", id="workspace-list"),
        pytest.param({"workspace": {"slug": "main"}}, "workspace", id="workspace-object"),
        pytest.param({"workspace": "Main"}, "workspace", id="workspace-upper-case"),
        pytest.param({"workspace": ""}, "workspace", id="workspace-empty"),
        pytest.param({"workspace": "main", "name": 5}, "name", id="name-int"),
        pytest.param({"workspace": "main", "name": 1.5}, "name", id="name-float"),
        pytest.param({"workspace": "main", "name": ["bob"]}, "name", id="name-list"),
        pytest.param({"workspace": "main", "name": "b" * 65}, "name", id="name-too-long"),
        pytest.param({"workspace": "main", "name": "Bob"}, "name", id="name-upper-case"),
        pytest.param({"workspace": "main", "name": "bob smith"}, "name", id="name-with-space"),
        pytest.param({"workspace": "main", "name": "-bob"}, "name", id="name-leading-dash"),
        pytest.param({"workspace": "main", "name": ""}, "name", id="name-empty"),
        pytest.param(
            {"workspace": "main", "tool_schema_fingerprint": 5},
            "tool_schema_fingerprint",
            id="fingerprint-int",
        ),
    ],
)
def test_a_field_of_the_wrong_type_or_form_is_refused_with_per_field_details(
    key_client, workspace, body, field
):
    before = stored()
    response = key_client.post(START, body, format="json")

    error = assert_error(response, 400, "validation_error")
    assert set(error["details"]) == {field}, error["details"]
    messages = error["details"][field]
    assert isinstance(messages, list)
    assert messages
    assert all(isinstance(message, str) and message for message in messages)
    assert stored() == before


def test_every_bad_field_is_reported_at_once(key_client, workspace):
    before = stored()
    response = key_client.post(START, {"workspace": 5, "name": "Bob"}, format="json")

    error = assert_error(response, 400, "validation_error")
    assert set(error["details"]) == {"workspace", "name"}
    assert stored() == before


# --- unknown paths and methods ----------------------------------------------------------------


@pytest.mark.parametrize("debug", [False, True], ids=["debug-off", "debug-on"])
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/v1/nope"),
        ("POST", "/api/v2/x"),
        ("GET", "/api/"),
        ("GET", "/api/v1/"),
        ("DELETE", "/api/v1/sessions/current/extra"),
        ("GET", "/api/v1/sessions/123"),
    ],
)
def test_an_unknown_api_path_is_a_json_not_found(settings, method, path, debug):
    settings.DEBUG = debug

    response = call(Client(), method, path, b'{"a": 1}')

    assert_error(response, 404, "not_found")


def test_the_api_root_without_its_slash_is_a_json_not_found():
    response = Client().get("/api")

    assert_error(response, 404, "not_found")


def test_an_unknown_api_path_is_json_even_for_a_browser(settings):
    settings.DEBUG = True

    response = Client().get("/api/v1/nope", HTTP_ACCEPT="text/html,application/xhtml+xml")

    assert_error(response, 404, "not_found")


@pytest.mark.parametrize("debug", [False, True], ids=["debug-off", "debug-on"])
@pytest.mark.parametrize("accept", [None, "application/json", "*/*"], ids=["none", "json", "any"])
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/nope"),
        ("POST", "/wp-login.php"),
        ("GET", "/static/nope.css"),
        ("GET", "/healthz/"),
        ("GET", "/adminx"),
    ],
)
def test_an_unknown_path_outside_the_api_is_a_json_not_found(settings, method, path, accept, debug):
    settings.DEBUG = debug
    headers = {} if accept is None else {"HTTP_ACCEPT": accept}

    response = call(Client(), method, path, **headers)

    assert_error(response, 404, "not_found")


def test_a_browser_may_get_a_page_for_an_unknown_path_outside_the_api():
    response = Client().get("/nope", HTTP_ACCEPT="text/html,application/xhtml+xml")

    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


def test_the_admin_keeps_its_own_pages():
    response = Client().get("/admin/nope/", HTTP_ACCEPT="application/json")

    # Django's admin sends a visitor who is not signed in to its login page.
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


@pytest.mark.parametrize("query", ["", "?next=x"])
def test_the_admin_without_its_slash_redirects_to_it(query):
    response = Client().get(f"/admin{query}")

    assert response.status_code == 301
    assert response["Location"] == f"/admin/{query}"


@pytest.mark.parametrize(
    ("method", "path", "client_fixture", "allowed"),
    [
        pytest.param("PUT", CURRENT, "session_client", {"GET", "DELETE"}, id="put-current"),
        pytest.param("PATCH", CURRENT, "session_client", {"GET", "DELETE"}, id="patch-current"),
        pytest.param("POST", CURRENT, "session_client", {"GET", "DELETE"}, id="post-current"),
        pytest.param("GET", START, "key_client", {"POST"}, id="get-start"),
        pytest.param("DELETE", START, "key_client", {"POST"}, id="delete-start"),
        pytest.param("POST", FINGERPRINT, "api_client", {"GET"}, id="post-fingerprint"),
        pytest.param("DELETE", FINGERPRINT, "api_client", {"GET"}, id="delete-fingerprint"),
    ],
)
def test_a_wrong_method_is_refused_with_method_not_allowed_and_an_allow_header(
    request, method, path, client_fixture, allowed
):
    client = request.getfixturevalue(client_fixture)

    before = stored()
    response = call(client, method, path, b'{"workspace": "main"}')

    assert_error(response, 405, "method_not_allowed")
    advertised = {item.strip() for item in response["Allow"].split(",")}
    assert allowed <= advertised
    assert method not in advertised
    assert stored() == before


# --- content negotiation ----------------------------------------------------------------------


@pytest.mark.parametrize("accept", ["text/html", "application/xml", "image/png"])
@pytest.mark.parametrize(("method", "path", "client_fixture"), ENDPOINTS)
def test_a_non_json_accept_header_still_gets_json(
    request, workspace, method, path, client_fixture, accept
):
    client = request.getfixturevalue(client_fixture)
    # Only the session start defines "workspace"; elsewhere it is an unknown field.
    body = b'{"workspace": "main"}' if path == START else b""

    response = call(client, method, path, body, HTTP_ACCEPT=accept)

    assert response.status_code in (200, 201), response.content[:500]
    assert response["Content-Type"] == "application/json"
    assert isinstance(response.json(), dict)


@pytest.mark.parametrize(("method", "path", "client_fixture"), AUTHENTICATED_ENDPOINTS)
def test_an_error_for_a_browser_is_still_json(api_client, method, path, client_fixture):
    response = call(api_client, method, path, HTTP_ACCEPT="text/html")

    assert_error(response, 401, "not_authenticated")


def test_an_error_to_a_call_with_a_stale_fingerprint_keeps_the_error_shape(api_client):
    response = api_client.get(CURRENT, HTTP_PLUMB_SCHEMA_FINGERPRINT="stale")

    assert_error(response, 401, "not_authenticated")
    assert isinstance(response.json()["schema_stale"]["current"], str)


# --- authentication ---------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path", "client_fixture"), AUTHENTICATED_ENDPOINTS)
def test_a_call_without_credentials_is_refused_with_not_authenticated(
    api_client, workspace, method, path, client_fixture
):
    before = stored()
    response = call(api_client, method, path, b'{"workspace": "main"}')

    assert_error(response, 401, "not_authenticated")
    assert response["WWW-Authenticate"] == REALM
    assert stored() == before


@pytest.mark.parametrize(
    "authorization",
    [
        pytest.param("Basic dXNlcjpwYXNz", id="basic"),
        pytest.param("Token abc", id="other-scheme"),
        pytest.param("Bearer", id="bearer-without-token"),
        pytest.param("Bearer    ", id="bearer-blank"),
        pytest.param("Bearer garbage", id="bearer-garbage"),
        pytest.param("Bearer plumb_tok_short", id="bearer-truncated-token"),
        pytest.param("Bearer plumb_xxx_abcdefgh_" + "a" * 43, id="bearer-unknown-kind"),
    ],
)
@pytest.mark.parametrize(("method", "path", "client_fixture"), AUTHENTICATED_ENDPOINTS)
def test_a_malformed_authorization_header_is_refused_with_invalid_token(
    api_client, workspace, method, path, client_fixture, authorization
):
    before = stored()
    response = call(
        api_client, method, path, b'{"workspace": "main"}', HTTP_AUTHORIZATION=authorization
    )

    assert_error(response, 401, "invalid_token")
    assert response["WWW-Authenticate"] == REALM
    assert stored() == before


def test_a_session_token_cannot_start_a_session(session_client, workspace):
    before = stored()
    response = session_client.post(START, VALID_START_BODY, format="json")

    assert_error(response, 401, "project_key_required")
    assert response["WWW-Authenticate"] == REALM
    assert stored() == before


@pytest.mark.parametrize(("method", "path", "client_fixture"), SESSION_ENDPOINTS)
def test_a_project_key_cannot_make_session_calls(key_client, method, path, client_fixture):
    response = call(key_client, method, path)

    assert_error(response, 401, "session_token_required")
    assert response["WWW-Authenticate"] == REALM


def test_an_unknown_project_key_of_the_right_form_is_refused_with_invalid_token(
    api_client, workspace
):
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {unknown_credential('key')}")

    before = stored()
    response = api_client.post(START, VALID_START_BODY, format="json")

    assert_error(response, 401, "invalid_token")
    assert stored() == before


def test_a_project_key_with_a_known_prefix_but_wrong_secret_is_refused(
    api_client, project_key, workspace
):
    head = project_key.raw_key[: len("plumb_key_") + 9]
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {head}{secrets.token_urlsafe(32)}")

    before = stored()
    response = api_client.post(START, VALID_START_BODY, format="json")

    assert_error(response, 401, "invalid_token")
    assert stored() == before


@pytest.mark.parametrize(("method", "path", "client_fixture"), SESSION_ENDPOINTS)
def test_an_unknown_session_token_of_the_right_form_is_refused_with_invalid_token(
    api_client, agent_session, method, path, client_fixture
):
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {unknown_credential('tok')}")

    response = call(api_client, method, path)

    assert_error(response, 401, "invalid_token")
    agent_session.refresh_from_db()
    assert agent_session.ended_at is None


def test_a_session_token_with_a_known_prefix_but_wrong_secret_is_refused(api_client, agent_session):
    head = agent_session.raw_token[: len("plumb_tok_") + 9]
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {head}{secrets.token_urlsafe(32)}")

    response = api_client.delete(CURRENT)

    assert_error(response, 401, "invalid_token")
    agent_session.refresh_from_db()
    assert agent_session.ended_at is None


def test_the_fingerprint_needs_no_credentials_and_ignores_bad_ones(api_client):
    response = api_client.get(FINGERPRINT, HTTP_AUTHORIZATION="Basic garbage")

    assert response.status_code == 200
    assert isinstance(response.json()["fingerprint"], str)


# --- rate limits ------------------------------------------------------------------------------


def assert_throttled(response) -> None:
    error = assert_error(response, 429, "throttled")
    retry_after = response["Retry-After"]
    assert retry_after.isdigit(), retry_after
    assert 1 <= int(retry_after) <= 60
    assert error["details"]["retry_after"] == int(retry_after)


def test_a_session_past_its_rate_is_refused_with_throttled_and_retry_after(
    settings, session_client
):
    settings.PLUMB_RATE_SESSION = "2/m"

    responses = [session_client.get(CURRENT) for _ in range(3)]

    assert [r.status_code for r in responses[:2]] == [200, 200]
    assert_throttled(responses[2])


def test_a_throttled_session_end_leaves_the_session_open(settings, session_client, agent_session):
    settings.PLUMB_RATE_SESSION = "2/m"
    session_client.get(CURRENT)
    session_client.get(CURRENT)

    response = session_client.delete(CURRENT)

    assert_throttled(response)
    agent_session.refresh_from_db()
    assert agent_session.ended_at is None


def test_a_project_key_past_its_rate_is_refused_with_throttled_and_retry_after(
    settings, key_client, workspace
):
    settings.PLUMB_RATE_KEY = "2/m"
    started = [key_client.post(START, VALID_START_BODY, format="json") for _ in range(2)]
    assert [r.status_code for r in started] == [201, 201]

    before = stored()
    response = key_client.post(START, VALID_START_BODY, format="json")

    assert_throttled(response)
    assert stored() == before


def test_the_session_and_key_limits_count_separately(settings, key_client, session_client):
    settings.PLUMB_RATE_SESSION = "2/m"
    settings.PLUMB_RATE_KEY = "2/m"
    session_client.get(CURRENT)
    session_client.get(CURRENT)

    assert key_client.post(START, VALID_START_BODY, format="json").status_code == 201
    assert_throttled(session_client.get(CURRENT))


def test_a_session_rate_that_is_off_never_throttles(settings, session_client):
    settings.PLUMB_RATE_SESSION = None

    statuses = {session_client.get(CURRENT).status_code for _ in range(25)}

    assert statuses == {200}


def test_a_key_rate_that_is_off_never_throttles(settings, key_client, workspace):
    settings.PLUMB_RATE_KEY = None
    sessions = Session.objects.count()

    statuses = {
        key_client.post(START, VALID_START_BODY, format="json").status_code for _ in range(21)
    }

    assert statuses == {201}
    assert Session.objects.count() == sessions + 21


@pytest.mark.parametrize("raw", ["off", "OFF", " off "])
def test_off_in_the_environment_turns_a_rate_into_none(monkeypatch, raw):
    monkeypatch.setenv("PLUMB_RATE_TEST", raw)

    assert env_rate("PLUMB_RATE_TEST", "10/s") is None


# --- failures outside the request's control ---------------------------------------------------


@pytest.mark.parametrize("debug", [False, True], ids=["debug-off", "debug-on"])
def test_a_crash_inside_a_view_is_a_json_internal_error(
    settings, monkeypatch, key_client, workspace, debug
):
    settings.DEBUG = debug

    def crash(*args, **kwargs):
        raise RuntimeError("secret internals")

    monkeypatch.setattr(services, "session_start", crash)

    before = stored()
    response = key_client.post(START, VALID_START_BODY, format="json")

    error = assert_error(response, 500, "internal_error")
    assert "secret internals" not in response.content.decode()
    assert error["details"] == {}
    assert stored() == before


def test_a_crash_while_ending_a_session_is_a_json_internal_error(
    monkeypatch, session_client, agent_session
):
    def crash(*args, **kwargs):
        raise RuntimeError("secret internals")

    monkeypatch.setattr(services, "session_end", crash)

    response = session_client.delete(CURRENT)

    assert_error(response, 500, "internal_error")
    assert "secret internals" not in response.content.decode()
    agent_session.refresh_from_db()
    assert agent_session.ended_at is None


@pytest.mark.parametrize("debug", [False, True], ids=["debug-off", "debug-on"])
@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", START), ("GET", CURRENT), ("GET", FINGERPRINT), ("GET", "/api/v1/nope")],
)
def test_a_disallowed_host_on_an_api_path_is_a_json_bad_request(
    settings, key_client, workspace, method, path, debug
):
    settings.DEBUG = debug

    before = stored()
    response = call(key_client, method, path, b'{"workspace": "main"}', HTTP_HOST="evil.example")

    assert_error(response, 400, "bad_request")
    assert stored() == before
