"""Hostile requests: each is refused with a 4xx in the one error shape, stores
nothing, and leaves the server answering.

Most cases go through Django's test client, which hands the bytes straight to
the WSGI application: that is plumb's own behaviour, whatever server runs it.
Header limits belong to the HTTP server in front, so the header cases also
run against a real one (pytest-django's ``live_server``, Django's threaded
development server built on ``http.server``). Its own limits, checked there:

* a request line or a header line longer than 65536 bytes, or more than 100
  header fields, is refused by ``http.server`` itself with ``431`` and its own
  small page, before plumb sees the request;
* anything under those limits reaches plumb and gets plumb's JSON answer.

gunicorn, which ``make serve`` runs, has tighter limits of the same kind (100
header fields, 8190 bytes per field: ``431``; a NUL or control character in a
header value: ``400``), answered with its own HTML page; plumb's credentials
are under 100 bytes, so no honest request comes near them.
"""

import http.client
import io
import json
import re
from urllib.parse import urlsplit

import pytest
from django.test import Client

from mailbox.models import AgentName, Conversation, Note, Session
from rooms.models import Event, Member, Message, Room

pytestmark = pytest.mark.django_db

ERROR_CODE = re.compile(r"^[a-z][a-z0-9_]*$")
SEQ_OVERFLOWS = [2**63, 2**64, 10**100]


# --- helpers --------------------------------------------------------------------------------


def stored() -> dict[str, int]:
    """Row counts a refused request must leave alone."""
    models = (Note, Event, Message, Session, Conversation, Room, Member, AgentName)
    return {model.__name__: model.objects.count() for model in models}


def assert_refused(response, status: int | None = None, code: str | None = None) -> dict:
    """A 4xx served as JSON in the one error shape; returns the ``error`` object."""
    content = response.content
    assert 400 <= response.status_code < 500, (response.status_code, content[:300])
    if status is not None:
        assert response.status_code == status, content[:300]
    assert response["Content-Type"].split(";")[0] == "application/json", response["Content-Type"]
    body = json.loads(content)
    assert isinstance(body, dict)
    assert set(body) <= {"error", "schema_stale"}, body
    error = body["error"]
    assert set(error) == {"code", "message", "details"}, error
    assert ERROR_CODE.match(error["code"]), error["code"]
    assert isinstance(error["message"], str)
    assert error["message"].strip()
    assert isinstance(error["details"], dict)
    if code is not None:
        assert error["code"] == code, error
    return error


@pytest.fixture
def world(workspace, project_key, agent_session, session_client):
    """A room with a message and a conversation, so paths can name real objects."""
    created = session_client.post("/api/v1/rooms/", {"slug": "dev"}, format="json")
    assert created.status_code == 201, created.content
    sent = session_client.post("/api/v1/rooms/dev/messages/", {"body": "hello"}, format="json")
    assert sent.status_code == 201, sent.content
    left = session_client.post("/api/v1/notes/", {"body": "to the next"}, format="json")
    assert left.status_code == 201, left.content
    return {
        "slug": "dev",
        "message_id": sent.json()["message"]["id"],
        "conversation_id": left.json()["conversation_id"],
        "key": project_key.raw_key,
        "token": agent_session.raw_token,
    }


def fill(path: str, world: dict) -> str:
    return path.format(**world)


def authorization(path: str, world: dict) -> str:
    credential = world["key"] if path.rstrip("/") == "/api/v1/sessions" else world["token"]
    return f"Bearer {credential}"


def assert_still_serving(world: dict) -> None:
    """The health check and a valid, read-only session call both still succeed."""
    client = Client()
    health = client.get("/healthz")
    assert health.status_code == 200, health.content
    assert health.json() == {"status": "ok"}
    current = client.get("/api/v1/sessions/current/", HTTP_AUTHORIZATION=f"Bearer {world['token']}")
    assert current.status_code == 200, current.content
    assert current.json()["session"]["name"] == "alice"


def send(world: dict, method: str, path: str, body: bytes = b"", content_type: str = "", **extra):
    path = fill(path, world)
    extra.setdefault("HTTP_AUTHORIZATION", authorization(path, world))
    return Client().generic(
        method, path, data=body, content_type=content_type or "application/json", **extra
    )


def refused_and_harmless(world, method, path, body=b"", content_type="", status=None, code=None):
    """Send one hostile request; check the refusal, the storage and the server after it."""
    before = stored()
    response = send(world, method, path, body, content_type)
    error = assert_refused(response, status, code)
    assert stored() == before
    assert_still_serving(world)
    return error


def as_json(value) -> bytes:
    return json.dumps(value).encode()


NOTES = "/api/v1/notes/"
MESSAGES = "/api/v1/rooms/{slug}/messages/"
READ = "/api/v1/rooms/{slug}/read/"
REVIEWS = "/api/v1/rooms/{slug}/messages/{message_id}/reviews/"
START = "/api/v1/sessions/"
ROOMS = "/api/v1/rooms/"
JOIN = "/api/v1/rooms/{slug}/join/"

# Every operation that reads a body, with a body that would succeed.
BODY_OPERATIONS = [
    (NOTES, {"body": "hi", "to": "alice"}),
    (MESSAGES, {"body": "hi"}),
    (REVIEWS, {"verdict": "approve"}),
    (READ, {"seq": 1}),
    (START, {"workspace": "main", "name": "bob"}),
    (ROOMS, {"slug": "ops"}),
    (JOIN, {"display_name": "Alice"}),
]


def test_the_valid_bodies_used_below_do_succeed(world):
    # The cases below corrupt these bodies; each must be a real call when intact.
    for path, body in BODY_OPERATIONS:
        response = send(world, "POST", path, as_json(body))
        assert response.status_code in {200, 201}, (path, response.content[:300])


# --- bodies: encoding, NUL, surrogates, size, nesting ----------------------------------------


@pytest.mark.parametrize(
    "corrupt",
    [
        pytest.param(lambda raw: raw[:-1] + b', "x": "\xff\xfe"}', id="invalid-utf8"),
        pytest.param(lambda raw: raw[:-1] + b', "x": "\xc0\xaf"}', id="overlong-utf8"),
        pytest.param(lambda raw: raw[:-1] + b', "x": "\xed\xa0\x80"}', id="encoded-surrogate"),
        pytest.param(lambda raw: raw[:-1] + b', "x": "\xe2\x82"}', id="truncated-utf8"),
        pytest.param(lambda raw: b"\xff" + raw, id="invalid-utf8-before-the-object"),
        pytest.param(lambda raw: raw[:-1] + b', "x": "\\ud800"}', id="lone-high-surrogate"),
        pytest.param(lambda raw: raw[:-1] + b', "x": "\\udc00"}', id="lone-low-surrogate"),
        pytest.param(lambda raw: raw[:-1] + b', "x": "\\udc00\\ud800"}', id="reversed-pair"),
        pytest.param(lambda raw: raw[:-1] + b', "\\ud800": 1}', id="surrogate-in-a-key"),
        pytest.param(lambda raw: raw[:-1] + b', "x": ["a", ["\\udfff"]]}', id="surrogate-deep"),
        pytest.param(
            lambda raw: raw[:-1] + b', "x": ' + b"[" * 10_000 + b"]" * 10_000 + b"}",
            id="arrays-nested-10000-deep",
        ),
        pytest.param(
            lambda raw: raw[:-1] + b', "x": ' + b'{"a": ' * 10_000 + b"1" + b"}" * 10_000 + b"}",
            id="objects-nested-10000-deep",
        ),
        pytest.param(lambda raw: b"[" * 10_000 + raw + b"]" * 10_000, id="body-nested-10000-deep"),
        pytest.param(lambda raw: raw[:-1] + b', "x": ' + b"9" * 5000 + b"}", id="5000-digit-int"),
        pytest.param(lambda raw: raw[:-1] + b', "x": 1e999}', id="float-overflow"),
        pytest.param(lambda raw: raw[:-1] + b', "x": NaN}', id="nan"),
        pytest.param(lambda raw: raw + b"\x00", id="nul-after-the-object"),
        pytest.param(lambda raw: raw.replace(b": ", b":\x00 ", 1), id="raw-nul-in-the-json"),
    ],
)
def test_a_corrupted_body_is_refused_as_invalid_json_by_every_operation(world, corrupt):
    for path, valid in BODY_OPERATIONS:
        refused_and_harmless(
            world, "POST", path, corrupt(as_json(valid)), status=400, code="invalid_json"
        )


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        pytest.param(NOTES, {"body": "a\x00b"}, "body", id="note-body"),
        pytest.param(NOTES, {"body": "hi", "to": "ali\x00ce"}, "to", id="note-to"),
        pytest.param(
            NOTES, {"body": "hi", "idempotency_key": "k\x00"}, "idempotency_key", id="note-key"
        ),
        pytest.param(
            NOTES, {"body": "hi", "conversation_id": "c\x00"}, "conversation_id", id="note-thread"
        ),
        pytest.param(MESSAGES, {"body": "\x00"}, "body", id="message-body"),
        pytest.param(MESSAGES, {"body": "hi", "reply_to": "m\x00"}, "reply_to", id="reply-to"),
        pytest.param(
            MESSAGES, {"body": "hi", "idempotency_key": "\x00"}, "idempotency_key", id="msg-key"
        ),
        pytest.param(REVIEWS, {"verdict": "comment", "body": "x\x00"}, "body", id="review-body"),
        pytest.param(REVIEWS, {"verdict": "approve\x00"}, "verdict", id="review-verdict"),
        pytest.param(START, {"workspace": "main\x00"}, "workspace", id="start-workspace"),
        pytest.param(START, {"workspace": "main", "name": "bo\x00b"}, "name", id="start-name"),
        pytest.param(ROOMS, {"slug": "o\x00ps"}, "slug", id="room-slug"),
        pytest.param(ROOMS, {"slug": "ops", "title": "T\x00"}, "title", id="room-title"),
        pytest.param(ROOMS, {"slug": "ops", "topic": "\x00"}, "topic", id="room-topic"),
        pytest.param(
            ROOMS, {"slug": "ops", "display_name": "A\x00"}, "display_name", id="room-display"
        ),
        pytest.param(JOIN, {"display_name": "\x00Alice"}, "display_name", id="join-display"),
        pytest.param(
            MESSAGES, {"body": "hi", "tool_schema_fingerprint": "f\x00"}, None, id="fingerprint"
        ),
        pytest.param(MESSAGES, {"bo\x00dy": "hi"}, "body", id="nul-in-a-key"),
    ],
)
def test_a_nul_character_in_any_string_field_is_a_validation_error(world, path, body, field):
    error = refused_and_harmless(world, "POST", path, as_json(body), status=400)

    assert error["code"] == "validation_error", error
    if field is not None:
        assert field in error["details"], error


def test_a_ten_megabyte_body_is_refused_as_too_large_by_every_operation(world):
    body = json.dumps({"body": "x" * (10 * 1024 * 1024), "workspace": "main", "seq": 1}).encode()

    for path, _ in BODY_OPERATIONS:
        refused_and_harmless(world, "POST", path, body, status=413, code="request_too_large")


@pytest.mark.parametrize(
    ("content_type", "body", "status", "code"),
    [
        pytest.param("text/plain", b'{"body": "hi"}', 415, "unsupported_media_type", id="text"),
        pytest.param("text/html", b"<p>hi</p>", 415, "unsupported_media_type", id="html"),
        pytest.param(
            "application/xml", b"<body>hi</body>", 415, "unsupported_media_type", id="xml"
        ),
        pytest.param(
            "application/x-www-form-urlencoded",
            b"body=hi",
            415,
            "unsupported_media_type",
            id="form",
        ),
        pytest.param(
            "multipart/form-data; boundary=B",
            b'--B\r\nContent-Disposition: form-data; name="body"\r\n\r\nhi\r\n--B--\r\n',
            415,
            "unsupported_media_type",
            id="multipart",
        ),
        pytest.param(
            "multipart/form-data", b"--B\r\n", 415, "unsupported_media_type", id="no-boundary"
        ),
        pytest.param(
            "application/octet-stream", b"\x00\x01\x02", 415, "unsupported_media_type", id="octets"
        ),
        pytest.param(
            "application/json; charset=latin-1",
            b'{"body": "h\xe9"}',
            415,
            "unsupported_media_type",
            id="latin-1",
        ),
        pytest.param(
            "application/json; charset=utf-16",
            '{"body": "hi"}'.encode("utf-16"),
            415,
            "unsupported_media_type",
            id="utf-16",
        ),
        pytest.param(
            "application/jsonx", b'{"body": "hi"}', 415, "unsupported_media_type", id="jsonx"
        ),
        pytest.param(";;;", b'{"body": "hi"}', 415, "unsupported_media_type", id="garbage-type"),
        pytest.param(
            "application/json; charset=",
            b'{"body": "hi"}',
            415,
            "unsupported_media_type",
            id="empty-charset",
        ),
    ],
)
def test_a_body_that_is_not_declared_json_is_refused_by_every_operation(
    world, content_type, body, status, code
):
    for path, _ in BODY_OPERATIONS:
        refused_and_harmless(world, "POST", path, body, content_type, status=status, code=code)


# --- integers: beyond 64 bits, negative, zero, fractional ------------------------------------


@pytest.mark.parametrize("value", [*SEQ_OVERFLOWS, -(2**64), -1])
@pytest.mark.parametrize(
    ("path", "field", "extra"),
    [
        pytest.param(MESSAGES, "after_seq", {"body": "hi"}, id="send-after-seq"),
        pytest.param(
            MESSAGES, "after_seq", {"body": "hi", "require_read": True}, id="send-require-read"
        ),
        pytest.param(READ, "seq", {}, id="mark-read-seq"),
    ],
)
def test_an_integer_out_of_range_in_a_body_is_a_validation_error(world, path, field, extra, value):
    body = as_json({**extra, field: value})

    error = refused_and_harmless(world, "POST", path, body, status=400, code="validation_error")
    assert field in error["details"], error


NOT_WHOLE_NUMBERS = [1.5, 2.0, 1e2, 0.0, True, "1", [1], {"n": 1}]


@pytest.mark.parametrize(
    ("path", "field", "extra", "value"),
    [
        *[(MESSAGES, "after_seq", {"body": "hi"}, value) for value in NOT_WHOLE_NUMBERS],
        # after_seq may be null (it means "my read position"); seq may not.
        *[(READ, "seq", {}, value) for value in [*NOT_WHOLE_NUMBERS, None]],
    ],
)
def test_anything_but_a_whole_json_number_where_an_integer_belongs_is_refused(
    world, path, field, extra, value
):
    body = as_json({**extra, field: value})

    error = refused_and_harmless(world, "POST", path, body, status=400, code="validation_error")
    assert field in error["details"], error


QUERY_CASES = [
    # (path, parameter, value)
    *[(MESSAGES, "after_seq", str(v)) for v in [*SEQ_OVERFLOWS, -1, -(2**64)]],
    *[(MESSAGES, "after_seq", v) for v in ["0.5", "1e3", "1e400", "nan", "inf", "9" * 5000]],
    *[
        (path, "limit", v)
        for path in (MESSAGES, "/api/v1/conversations/", "/api/v1/mentions/")
        for v in ["0", "-1", "-0", str(2**64), str(10**100), "1.5", "1e2", "nan", "ten"]
    ],
    *[(NOTES, "wait", v) for v in ["-1", "31", str(10**100), "1e400", "nan", "inf", "-inf", "x"]],
    (MESSAGES, "mark_read", "maybe"),
    (MESSAGES, "kinds", "message,bogus"),
    (MESSAGES, "kinds", "x" * 201),
]


@pytest.mark.parametrize(
    ("path", "parameter", "value"),
    [pytest.param(p, n, v, id=f"{p.split('/')[-2]}-{n}={v[:24]}") for p, n, v in QUERY_CASES],
)
def test_a_query_parameter_out_of_range_or_of_the_wrong_type_is_a_validation_error(
    world, path, parameter, value
):
    before = stored()
    response = send(world, "GET", f"{path}?{parameter}={value}")

    error = assert_refused(response, 400, "validation_error")
    assert parameter in error["details"], error
    assert stored() == before
    assert_still_serving(world)


@pytest.mark.parametrize(
    ("path", "parameter"),
    [
        (MESSAGES, "kinds"),
        ("/api/v1/conversations/", "after_id"),
        ("/api/v1/mentions/", "after_id"),
    ],
)
def test_a_nul_character_in_a_query_parameter_is_a_validation_error(world, path, parameter):
    response = send(world, "GET", f"{path}?{parameter}=message%00")

    error = assert_refused(response, 400, "validation_error")
    assert parameter in error["details"], error
    assert_still_serving(world)


@pytest.mark.parametrize(
    "query",
    ["after_id=%FF%FE", "after_id=%ED%A0%80", "after_id=%C0%AF", "after_id=%F0%9F%92%A9"],
    ids=["invalid-utf8", "encoded-surrogate", "overlong", "emoji"],
)
@pytest.mark.parametrize("path", ["/api/v1/conversations/", "/api/v1/mentions/"])
def test_a_cursor_that_names_nothing_is_a_json_not_found_whatever_its_bytes(world, path, query):
    before = stored()
    response = send(world, "GET", f"{path}?{query}")

    assert_refused(response, 404)
    assert stored() == before
    assert_still_serving(world)


# --- paths ------------------------------------------------------------------------------------

UNICODE_SEGMENTS = [
    "dév",
    "%F0%9F%92%A9",  # U+1F4A9, percent-encoded UTF-8
    "\U0001f4a9",
    "\uff24\uff25\uff36",  # fullwidth letters fold to "DEV" under NFKC
    "\u0663",  # ARABIC-INDIC DIGIT THREE: a digit, but not [0-9]
    "dev\u200b",  # zero-width space
    "\u202edev",  # right-to-left override
    "%FF",  # not UTF-8 at all
    "%ED%A0%80",  # an encoded surrogate
    "dev%00",
    "d" * 65,
]


PATH_PARAMETERS = [
    ("GET", "/api/v1/rooms/{x}/"),
    ("POST", "/api/v1/rooms/{x}/join/"),
    ("POST", "/api/v1/rooms/{x}/leave/"),
    ("GET", "/api/v1/rooms/{x}/members/"),
    ("GET", "/api/v1/rooms/{x}/messages/"),
    ("POST", "/api/v1/rooms/{x}/messages/"),
    ("POST", "/api/v1/rooms/{x}/read/"),
    ("POST", "/api/v1/rooms/{x}/messages/{message_id}/reviews/"),
    ("POST", "/api/v1/rooms/dev/messages/{x}/reviews/"),
    ("GET", "/api/v1/conversations/{x}/"),
]


@pytest.mark.parametrize("segment", UNICODE_SEGMENTS)
def test_a_path_parameter_outside_its_alphabet_is_a_json_not_found_everywhere(world, segment):
    body = as_json({"body": "hi", "verdict": "approve", "seq": 1})

    for method, template in PATH_PARAMETERS:
        path = template.replace("{x}", segment)
        refused_and_harmless(world, method, path, body, status=404)


# --- headers and tokens (through the test client: no server limits) --------------------------


@pytest.mark.parametrize(
    "header",
    [
        pytest.param("Bearer " + "x" * 65_536, id="64KiB-of-junk"),
        pytest.param("Bearer plumb_tok_abcdefgh_" + "A" * 1_000_000, id="1MB-token"),
        pytest.param("Bearer plumb_tok_abcdefgh_" + "A" * 42 + "\x00", id="nul-in-token"),
        pytest.param("Bearer plumb_tok_abcdefgh_" + "é" * 43, id="non-ascii-token"),
        pytest.param("Bearer " + "plumb_tok_" * 10_000, id="repeated-prefix"),
        pytest.param("B" * 65_536, id="64KiB-scheme"),
        pytest.param("Bearer  " + " " * 65_536, id="64KiB-of-spaces"),
    ],
)
def test_a_huge_or_malformed_token_is_refused_as_invalid(world, header):
    body = as_json({"workspace": "main", "body": "hi"})

    for method, path in [("GET", "/api/v1/sessions/current/"), ("POST", START), ("POST", NOTES)]:
        before = stored()
        response = send(world, method, path, body, HTTP_AUTHORIZATION=header)

        assert_refused(response, 401, "invalid_token")
        assert response["WWW-Authenticate"] == 'Bearer realm="plumb"'
        assert stored() == before
        assert_still_serving(world)


def test_a_thousand_headers_do_not_confuse_plumb(world):
    padding = {f"HTTP_X_PAD_{i}": "v" * 64 for i in range(1000)}
    before = stored()

    refused = Client().get("/api/v1/sessions/current/", HTTP_AUTHORIZATION="Bearer nope", **padding)
    served = Client().get(
        "/api/v1/sessions/current/", HTTP_AUTHORIZATION=f"Bearer {world['token']}", **padding
    )

    assert_refused(refused, 401, "invalid_token")
    assert served.status_code == 200, served.content
    assert stored() == before
    assert_still_serving(world)


def test_a_huge_host_header_is_a_json_bad_request(world):
    before = stored()
    response = Client().get("/api/v1/sessions/current/", HTTP_HOST="h" * 65_536)

    assert_refused(response, 400, "bad_request")
    assert stored() == before
    assert_still_serving(world)


# --- a real server: its header limits, then plumb's answer -----------------------------------


def raw_request(live_server, method: str, path: str, headers: list[tuple[str, str]], body=b""):
    """One request over a fresh connection; returns (status, headers, body)."""
    url = urlsplit(live_server.url)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        connection.putrequest(method, path, skip_accept_encoding=True)
        for name, value in headers:
            connection.putheader(name, value)
        if body:
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body or None)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def live_still_serving(live_server, token: str) -> None:
    status, _, body = raw_request(live_server, "GET", "/healthz", [])
    assert status == 200, body
    status, _, body = raw_request(
        live_server, "GET", "/api/v1/sessions/current/", [("Authorization", f"Bearer {token}")]
    )
    assert status == 200, body


def assert_json_error(status: int, headers: dict, body: bytes, expected: int, code: str) -> None:
    assert status == expected, body[:300]
    assert headers["Content-Type"].startswith("application/json"), headers
    error = json.loads(body)["error"]
    assert error["code"] == code, error


@pytest.fixture
def live_world(live_server, transactional_db, workspace, agent_session):
    return {"token": agent_session.raw_token}


@pytest.mark.django_db(transaction=True)
def test_a_60_kib_authorization_header_reaches_plumb_and_is_refused_as_json(
    live_server, live_world
):
    before = stored()
    status, headers, body = raw_request(
        live_server,
        "GET",
        "/api/v1/sessions/current/",
        [("Authorization", "Bearer " + "x" * 60 * 1024)],
    )

    assert_json_error(status, headers, body, 401, "invalid_token")
    assert stored() == before
    live_still_serving(live_server, live_world["token"])


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "headers",
    [
        pytest.param([("Authorization", "Bearer " + "x" * 64 * 1024)], id="64KiB-authorization"),
        pytest.param([(f"X-Pad-{i}", "v") for i in range(1000)], id="1000-headers"),
    ],
)
def test_headers_past_the_servers_limits_are_refused_by_it_and_it_keeps_serving(
    live_server, live_world, headers
):
    before = stored()
    status, _, _ = raw_request(live_server, "GET", "/api/v1/sessions/current/", headers)

    # http.server's own refusal (431 Request Header Fields Too Large): plumb never
    # saw the request, so the body is the server's, not the JSON error shape.
    assert status == 431
    assert stored() == before
    live_still_serving(live_server, live_world["token"])


@pytest.mark.django_db(transaction=True)
def test_ninety_headers_with_a_valid_token_are_served(live_server, live_world):
    headers = [(f"X-Pad-{i}", "v" * 64) for i in range(90)]
    headers.append(("Authorization", f"Bearer {live_world['token']}"))

    status, _, body = raw_request(live_server, "GET", "/api/v1/sessions/current/", headers)

    assert status == 200, body[:300]
    assert json.loads(body)["session"]["name"] == "alice"


@pytest.mark.django_db(transaction=True)
def test_a_ten_megabyte_body_over_a_real_connection_is_refused_as_json(live_server, live_world):
    body = json.dumps({"body": "x" * (10 * 1024 * 1024)}).encode()
    before = stored()

    status, headers, content = raw_request(
        live_server,
        "POST",
        "/api/v1/notes/",
        [
            ("Authorization", f"Bearer {live_world['token']}"),
            ("Content-Type", "application/json"),
        ],
        body,
    )

    assert_json_error(status, headers, content, 413, "request_too_large")
    assert stored() == before
    live_still_serving(live_server, live_world["token"])


def test_a_nul_in_the_content_type_is_refused_in_the_error_shape():
    from plumb_site.wsgi import application

    captured = {}

    def start_response(status, headers):
        captured["status"] = status
        captured["headers"] = dict(headers)

    body = b"".join(
        application(
            {
                "REQUEST_METHOD": "POST",
                "PATH_INFO": "/api/v1/notes/",
                "CONTENT_TYPE": "application/json; charset=\x00",
                "CONTENT_LENGTH": "2",
                "wsgi.input": io.BytesIO(b"{}"),
            },
            start_response,
        )
    )

    assert captured["status"].startswith("400")
    assert captured["headers"]["Content-Type"] == "application/json"
    assert json.loads(body)["error"]["code"] == "bad_request"


def test_under_a_plain_wsgi_server_a_declared_body_past_the_limit_is_refused_unread(settings):
    from plumb_site.wsgi import application

    class Unreadable(io.RawIOBase):
        def read(self, size=-1):
            raise AssertionError("the body was read")

    captured = {}

    def start_response(status, headers):
        captured["status"] = status

    body = b"".join(
        application(
            {
                "REQUEST_METHOD": "POST",
                "PATH_INFO": "/api/v1/notes/",
                "CONTENT_TYPE": "application/json",
                "CONTENT_LENGTH": str(settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1),
                "wsgi.input": Unreadable(),
            },
            start_response,
        )
    )

    assert captured["status"].startswith("413")
    assert json.loads(body)["error"]["code"] == "request_too_large"


def test_under_a_plain_wsgi_server_an_oversize_mcp_request_is_refused_in_json_rpc(settings):
    from plumb_site.wsgi import application

    captured = {}
    body = b"".join(
        application(
            {
                "REQUEST_METHOD": "POST",
                "PATH_INFO": "/mcp",
                "CONTENT_TYPE": "application/json",
                "CONTENT_LENGTH": str(settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1),
                "wsgi.input": io.BytesIO(b""),
            },
            lambda status, headers: captured.update(status=status),
        )
    )

    assert captured["status"].startswith("413")
    answer = json.loads(body)
    assert answer["error"]["code"] == -32600
    assert answer["error"]["data"]["error"]["code"] == "request_too_large"


@pytest.mark.django_db
def test_options_is_an_undocumented_method(session_client):
    response = session_client.options("/api/v1/sessions/current/")

    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"
