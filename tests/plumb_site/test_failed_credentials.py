"""Failed credentials are throttled per client address (SPEC §2, ``PLUMB_RATE_AUTH_FAIL``).

A credential that matches nothing counts against the address that sent it,
at every door that checks one: REST session tokens, project keys, the MCP
endpoint, ``/metrics`` and the admin's login. Past the rate (``20/m`` by
default) every credential from that address, a valid one too, is refused
with ``429 throttled`` and ``Retry-After`` before it is looked up. Revoked,
ended and expired credentials, credentials of the wrong kind and requests
with none are not counted. The throttles' clock is frozen, as in
``test_rate_limits``.
"""

from __future__ import annotations

import json
import secrets
from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.test import Client
from django.utils import timezone
from prometheus_client import REGISTRY
from rest_framework.test import APIClient
from rest_framework.throttling import SimpleRateThrottle

from mailbox.models import Session
from mailbox.services import key_revoke, session_end
from tests.conftest import assert_error
from tests.factories import SessionFactory
from tests.plumb_site.test_rate_limits import Clock, assert_throttled
from tests.plumb_site.test_settings import start as start_process

pytestmark = pytest.mark.django_db

START = "/api/v1/sessions/"
CURRENT = "/api/v1/sessions/current/"
RATE = 20  # the default, PLUMB_RATE_AUTH_FAIL=20/m: no test here overrides it unless it says so


@pytest.fixture(autouse=True)
def clock(monkeypatch) -> Clock:
    """The throttles' notion of now, frozen for every test here (moved by hand)."""
    frozen = Clock()
    monkeypatch.setattr(SimpleRateThrottle, "timer", lambda self: frozen.now)
    return frozen


def unknown(kind: str = "tok") -> str:
    """A well-formed credential that matches no row: what a guesser sends."""
    prefix = "".join(secrets.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(8))
    return f"plumb_{kind}_{prefix}_{secrets.token_urlsafe(32)}"


def get(path: str, credential: str | None, address: str = "127.0.0.1", **extra):
    client = APIClient()
    if credential is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {credential}")
    return client.get(path, REMOTE_ADDR=address, **extra)


def start(credential: str, name: str, address: str = "127.0.0.1"):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {credential}")
    body = {"workspace": "main", "name": name}
    return client.post(START, body, format="json", REMOTE_ADDR=address)


def fail(times: int, address: str = "127.0.0.1") -> None:
    """``times`` guesses at a session token from ``address``, each refused as unknown."""
    for _ in range(times):
        assert_error(get(CURRENT, unknown(), address), 401, "invalid_token")


def mcp(headers: dict[str, str], address: str = "127.0.0.1"):
    message = {"jsonrpc": "2.0", "id": 7, "method": "tools/call"}
    message["params"] = {"name": "list_rooms", "arguments": {}}
    return Client().post(
        "/mcp",
        data=json.dumps(message),
        content_type="application/json",
        headers=headers,
        REMOTE_ADDR=address,
    )


def mcp_refusal(response, status: int, code: str) -> dict:
    """A request refused before any tool ran: JSON-RPC -31000 with the REST error object."""
    assert response.status_code == status, response.content[:300]
    body = response.json()
    assert body["id"] == 7
    error = body["error"]
    assert error["code"] == -31000
    assert error["data"]["error"]["code"] == code, error
    return error


def throttled_count() -> float:
    return REGISTRY.get_sample_value("plumb_throttled_total", {"limit": "auth_fail"}) or 0.0


# --- REST -------------------------------------------------------------------------------------


def test_the_rate_is_twenty_failures_a_minute_by_default():
    assert django_settings.PLUMB_RATE_AUTH_FAIL == "20/m"


def test_twenty_unknown_tokens_are_refused_401_and_the_next_credential_429():
    fail(RATE)

    response = get(CURRENT, unknown())

    assert assert_throttled(response) == 60
    assert "WWW-Authenticate" not in response


def test_a_throttled_address_is_refused_before_its_credential_is_looked_up(
    agent_session, django_assert_num_queries
):
    fail(RATE)
    seen = agent_session.last_seen_at

    # The valid token too: were it let through, a guesser would learn which
    # guess was right from the one answer that is not a 429.
    with django_assert_num_queries(0):
        response = get(CURRENT, agent_session.raw_token)

    assert_throttled(response)
    agent_session.refresh_from_db()
    assert agent_session.last_seen_at == seen


def test_unknown_project_keys_count_and_then_no_session_starts(project_key):
    for n in range(RATE):
        assert_error(start(unknown("key"), f"guess-{n}"), 401, "invalid_token")

    response = start(project_key.raw_key, "real")

    assert_throttled(response)
    assert not Session.objects.exists()
    project_key.refresh_from_db()
    assert project_key.last_used_at is None


def test_malformed_credentials_count_as_failures():
    for header in ["Bearer nope", "Token abc", "Basic dXNlcjpwYXNz", "Bearer plumb_tok_x"] * 5:
        response = APIClient().get(CURRENT, HTTP_AUTHORIZATION=header)
        assert_error(response, 401, "invalid_token")

    assert_throttled(get(CURRENT, unknown()))


def test_failures_at_every_door_share_one_count_per_address(workspace):
    for _ in range(7):
        assert_error(get(CURRENT, unknown()), 401, "invalid_token")
    for n in range(7):
        assert_error(start(unknown("key"), f"guess-{n}"), 401, "invalid_token")
    for _ in range(6):
        mcp_refusal(mcp({"Authorization": f"Bearer {unknown()}"}), 401, "invalid_token")

    assert_throttled(get(CURRENT, unknown()))


def test_successful_credentials_are_not_counted(settings, agent_session, project_key):
    settings.PLUMB_RATE_SESSION = settings.PLUMB_RATE_KEY = None
    for n in range(30):
        assert get(CURRENT, agent_session.raw_token).status_code == 200
        assert start(project_key.raw_key, f"worker-{n}").status_code == 201
    fail(RATE)

    assert_throttled(get(CURRENT, agent_session.raw_token))


def test_another_address_is_not_affected(agent_session):
    fail(RATE, address="203.0.113.7")
    assert_throttled(get(CURRENT, agent_session.raw_token, address="203.0.113.7"))

    assert get(CURRENT, agent_session.raw_token, address="203.0.113.8").status_code == 200
    fail(RATE, address="203.0.113.8")
    assert_throttled(get(CURRENT, unknown(), address="203.0.113.8"))


def test_x_forwarded_for_does_not_make_a_new_address():
    for n in range(RATE):
        response = get(CURRENT, unknown(), HTTP_X_FORWARDED_FOR=f"198.51.100.{n}")
        assert_error(response, 401, "invalid_token")

    assert_throttled(get(CURRENT, unknown(), HTTP_X_FORWARDED_FOR="198.51.100.250"))


def test_an_ipv6_client_is_counted_by_its_64_bit_network(agent_session):
    for n in range(RATE):
        fail(1, address=f"2001:db8:1:2::{n + 1:x}")

    assert_throttled(get(CURRENT, agent_session.raw_token, address="2001:db8:1:2:ffff::1"))
    assert get(CURRENT, agent_session.raw_token, address="2001:db8:1:3::1").status_code == 200


def test_an_ipv4_mapped_address_is_the_ipv4_address(agent_session):
    fail(RATE, address="::ffff:192.0.2.9")

    assert_throttled(get(CURRENT, agent_session.raw_token, address="192.0.2.9"))


def test_the_address_may_try_again_once_its_oldest_failure_leaves_the_window(clock, agent_session):
    fail(1)
    clock.advance(30)
    fail(RATE - 1)
    assert assert_throttled(get(CURRENT, agent_session.raw_token)) == 30

    clock.advance(30.01)

    # One failure left the window: one more credential is checked.
    assert get(CURRENT, agent_session.raw_token).status_code == 200
    fail(1)
    assert_throttled(get(CURRENT, agent_session.raw_token))


def test_a_request_without_a_credential_is_not_counted_nor_throttled():
    for _ in range(RATE + 5):
        assert_error(get(CURRENT, None), 401, "not_authenticated")
    fail(RATE)

    # Nothing to guess without a credential: still the 401 that says so.
    assert_error(get(CURRENT, None), 401, "not_authenticated")


def test_a_credential_of_the_wrong_kind_is_not_counted(agent_session, project_key):
    for n in range(RATE + 5):
        assert_error(get(CURRENT, project_key.raw_key), 401, "session_token_required")
        assert_error(start(agent_session.raw_token, f"n{n}"), 401, "project_key_required")

    assert get(CURRENT, agent_session.raw_token).status_code == 200


def test_revoked_ended_and_expired_credentials_are_not_counted(
    settings, workspace, project_key, agent_session
):
    # Only the real secret reaches these answers, so they are no guess; and a
    # revocation that ends many agents' sessions behind one address must not
    # lock that address out.
    ended = SessionFactory(workspace=workspace, name="ended")
    session_end(ended)
    expired = SessionFactory(workspace=workspace, name="expired")
    Session.objects.filter(pk=expired.pk).update(
        last_seen_at=timezone.now() - timedelta(seconds=settings.PLUMB_SESSION_TTL + 1)
    )
    key_revoke(project_key, actor="test")

    for n in range(RATE + 5):
        assert_error(start(project_key.raw_key, f"n{n}"), 401, "key_revoked")
        assert_error(get(CURRENT, ended.raw_token), 401, "session_ended")
        assert_error(get(CURRENT, expired.raw_token), 401, "session_expired")

    other = SessionFactory(workspace=workspace, name="other")
    assert get(CURRENT, other.raw_token).status_code == 200


def test_off_disables_the_limit(settings, agent_session):
    settings.PLUMB_RATE_AUTH_FAIL = None

    fail(RATE * 3)

    assert get(CURRENT, agent_session.raw_token).status_code == 200


def test_a_lower_rate_takes_effect(settings):
    settings.PLUMB_RATE_AUTH_FAIL = "3/h"
    fail(3)

    assert assert_throttled(get(CURRENT, unknown())) == 3600


def test_refusals_are_counted_in_the_throttled_metric():
    before = throttled_count()
    fail(RATE)

    for _ in range(3):
        assert_throttled(get(CURRENT, unknown()))

    assert throttled_count() - before == 3


@pytest.mark.parametrize(("value", "expected"), [("off", "None"), ("lots", "ImproperlyConfigured")])
def test_the_rate_comes_from_the_environment(tmp_path, value, expected):
    done = start_process(
        tmp_path,
        "import django; django.setup(); from django.conf import settings; "
        "print(repr(settings.PLUMB_RATE_AUTH_FAIL))",
        PLUMB_RATE_AUTH_FAIL=value,
    )

    if expected == "ImproperlyConfigured":
        assert done.returncode != 0
        assert "PLUMB_RATE_AUTH_FAIL" in done.stderr
    else:
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == expected


# --- MCP --------------------------------------------------------------------------------------


def test_the_mcp_door_counts_unknown_credentials_and_then_refuses_with_429(project_key):
    for n in range(RATE):
        guess = unknown("key" if n % 2 else "tok")
        headers = {"Authorization": f"Bearer {guess}", "Plumb-Workspace": "main"}
        response = mcp({**headers, "Plumb-Name": "alice"})
        mcp_refusal(response, 401, "invalid_token")
        assert response["WWW-Authenticate"] == 'Bearer realm="plumb"'

    headers = {
        "Authorization": f"Bearer {project_key.raw_key}",
        "Plumb-Workspace": "main",
        "Plumb-Name": "alice",
    }
    response = mcp(headers)

    error = mcp_refusal(response, 429, "throttled")
    assert response["Retry-After"] == "60"
    assert error["data"]["error"]["details"] == {"retry_after": 60}
    assert "WWW-Authenticate" not in response
    # Refused before the key was looked up: no implicit session started.
    assert not Session.objects.exists()


def test_mcp_failures_throttle_the_rest_door_of_the_same_address(agent_session):
    for _ in range(RATE):
        mcp_refusal(mcp({"Authorization": "Bearer nope"}), 401, "invalid_token")

    assert_throttled(get(CURRENT, agent_session.raw_token))
    mcp_refusal(mcp({"Authorization": f"Bearer {agent_session.raw_token}"}), 429, "throttled")
    ok = mcp({"Authorization": f"Bearer {agent_session.raw_token}"}, address="192.0.2.1")
    assert ok.status_code == 200, ok.content[:300]


def test_an_unknown_mcp_session_id_is_not_counted(project_key):
    # Not a credential: it works only next to a valid project key (SPEC §6).
    headers = {"Authorization": f"Bearer {project_key.raw_key}", "Plumb-Workspace": "main"}
    for n in range(RATE + 5):
        response = mcp({**headers, "Mcp-Session-Id": f"mcp_unknown{n}"})
        mcp_refusal(response, 404, "invalid_token")

    assert mcp({**headers, "Plumb-Name": "alice"}).status_code == 200


# --- /metrics ---------------------------------------------------------------------------------

METRICS_TOKEN = "metrics-token-0123456789"


def test_wrong_metrics_tokens_count_and_then_the_right_one_is_refused(settings):
    settings.PLUMB_METRICS_TOKEN = METRICS_TOKEN
    for _ in range(RATE):
        response = Client().get("/metrics", headers={"Authorization": "Bearer wrong-token"})
        assert_error(response, 401, "invalid_token")

    response = Client().get("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})

    assert assert_throttled(response) == 60
    other = Client().get(
        "/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, REMOTE_ADDR="192.0.2.1"
    )
    assert other.status_code == 200


def test_a_metrics_scrape_without_a_token_is_not_counted(settings, agent_session):
    settings.PLUMB_METRICS_TOKEN = METRICS_TOKEN
    for _ in range(RATE + 5):
        assert_error(Client().get("/metrics"), 401, "not_authenticated")

    assert get(CURRENT, agent_session.raw_token).status_code == 200


# --- the admin's login ------------------------------------------------------------------------

LOGIN = "/admin/login/"


@pytest.fixture
def staff(settings, django_user_model):
    # Twenty sign-ins with the production hasher take seconds; what is tested is the count.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    return django_user_model.objects.create_user(
        "operator", password="right-password", is_staff=True
    )


def sign_in(client: Client, password: str, username: str = "operator", address: str = "127.0.0.1"):
    data = {"username": username, "password": password, "next": "/admin/"}
    return client.post(LOGIN, data, REMOTE_ADDR=address)


def test_twenty_wrong_passwords_and_then_no_sign_in_at_all(staff):
    client = Client()
    for _ in range(RATE):
        response = sign_in(client, "wrong-password")
        assert response.status_code == 200
        assert "_auth_user_id" not in client.session

    response = sign_in(client, "right-password")

    assert response.status_code == 429
    assert response["Retry-After"] == "60"
    assert response["Content-Type"].startswith("text/html")
    assert b"Too many failed sign-ins from your address: try again in 60 s." in response.content
    assert "_auth_user_id" not in client.session
    # Another address signs in as usual.
    assert sign_in(Client(), "right-password", address="192.0.2.1").status_code == 302


def test_admin_failures_and_api_failures_share_the_count(staff):
    fail(RATE - 1)
    assert sign_in(Client(), "wrong-password").status_code == 200

    assert_throttled(get(CURRENT, unknown()))
    assert sign_in(Client(), "right-password").status_code == 429


def test_an_empty_login_form_is_not_counted_and_a_good_sign_in_works(staff):
    client = Client()
    for _ in range(RATE + 5):
        assert client.post(LOGIN, {"username": "operator"}).status_code == 200

    assert sign_in(client, "right-password").status_code == 302
    assert client.session["_auth_user_id"] == str(staff.pk)
