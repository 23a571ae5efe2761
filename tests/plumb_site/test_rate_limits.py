"""Rate limits per session and per project key (SPEC §2).

``PLUMB_RATE_SESSION`` bounds every call made with one session token and
``PLUMB_RATE_KEY`` the session starts made with one project key; past either,
the answer is ``429 throttled`` in the one error shape with ``Retry-After``.
The throttles' clock is frozen (and moved by hand) so that no test depends on
how fast the machine runs.
"""

import re

import pytest
from django.core.exceptions import ImproperlyConfigured
from rest_framework.test import APIClient
from rest_framework.throttling import SimpleRateThrottle

from common import wake
from mailbox.models import Note, Session
from mailbox.throttles import SessionRateThrottle
from plumb_site.settings import env_rate
from tests.conftest import client_for
from tests.factories import ProjectKeyFactory, SessionFactory

pytestmark = pytest.mark.django_db

START = "/api/v1/sessions/"
CURRENT = "/api/v1/sessions/current/"
NOTES = "/api/v1/notes/"


class Clock:
    def __init__(self, now: float = 1_000_000.0):
        self.now = now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch) -> Clock:
    """The throttles' notion of now; the cache still expires entries in real time."""
    frozen = Clock()
    monkeypatch.setattr(SimpleRateThrottle, "timer", lambda self: frozen.now)
    return frozen


def assert_throttled(response) -> int:
    """429 in the one error shape with an integer Retry-After >= 1; returns it."""
    assert response.status_code == 429, response.content[:300]
    assert response["Content-Type"] == "application/json"
    retry_after = response["Retry-After"]
    assert re.fullmatch(r"[1-9][0-9]*", retry_after), retry_after
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"code", "message", "details"}
    assert error["code"] == "throttled"
    assert error["message"]
    assert error["details"] == {"retry_after": int(retry_after)}
    return int(retry_after)


def bearer_client(credential: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {credential}")
    return client


def start(key, name: str):
    """Start a session in ``main`` with the project key."""
    client = bearer_client(key.raw_key)
    return client.post(START, {"workspace": "main", "name": name}, format="json")


# --- per session ------------------------------------------------------------------------------


def test_a_session_past_its_rate_is_throttled_with_retry_after(settings, clock, session_client):
    settings.PLUMB_RATE_SESSION = "3/m"

    for _ in range(3):
        assert session_client.get(CURRENT).status_code == 200
    response = session_client.get(CURRENT)

    assert assert_throttled(response) == 60


def test_every_session_call_counts_against_the_same_limit(settings, clock, session_client):
    settings.PLUMB_RATE_SESSION = "3/m"

    assert session_client.get(CURRENT).status_code == 200
    assert session_client.get("/api/v1/rooms/").status_code == 200
    assert session_client.get(NOTES).status_code == 200
    before = Note.objects.count()
    response = session_client.post(NOTES, {"body": "hello"}, format="json")

    assert_throttled(response)
    assert Note.objects.count() == before


def test_the_session_may_call_again_once_the_window_has_passed(settings, clock, session_client):
    settings.PLUMB_RATE_SESSION = "2/s"
    assert session_client.get(CURRENT).status_code == 200
    assert session_client.get(CURRENT).status_code == 200
    assert assert_throttled(session_client.get(CURRENT)) == 1

    clock.advance(1.01)

    assert session_client.get(CURRENT).status_code == 200


def test_retry_after_rounds_a_fraction_of_a_second_up_to_one(settings, clock, session_client):
    settings.PLUMB_RATE_SESSION = "1/s"
    assert session_client.get(CURRENT).status_code == 200

    clock.advance(0.75)  # 0.25 s of the window left: Retry-After must not say 0
    assert assert_throttled(session_client.get(CURRENT)) == 1


def test_one_sessions_limit_does_not_affect_another_session(
    settings, clock, workspace, agent_session, session_client
):
    settings.PLUMB_RATE_SESSION = "2/h"
    other = client_for(SessionFactory(workspace=workspace, name="bob"))
    for _ in range(2):
        assert session_client.get(CURRENT).status_code == 200
    assert_throttled(session_client.get(CURRENT))

    for _ in range(2):
        response = other.get(CURRENT)
        assert response.status_code == 200, response.content
        assert response.json()["session"]["name"] == "bob"
    assert_throttled(other.get(CURRENT))


def test_the_session_limit_is_off_when_set_to_none(settings, clock, session_client):
    settings.PLUMB_RATE_SESSION = None

    for _ in range(50):
        assert session_client.get(CURRENT).status_code == 200


def test_a_project_key_start_is_not_counted_against_the_session_limit(
    settings, clock, project_key, session_client
):
    settings.PLUMB_RATE_SESSION = "1/h"
    settings.PLUMB_RATE_KEY = None
    assert session_client.get(CURRENT).status_code == 200
    assert_throttled(session_client.get(CURRENT))

    for n in range(5):
        assert start(project_key, f"worker-{n}").status_code == 201


def test_a_parked_calls_later_run_is_not_counted_again_at_any_door(settings, clock):
    """The REST views and the MCP tools both count through the throttle: a resumed
    run of a call passes it uncounted, past the rate or not
    (tests/plumb_site/test_asgi.py wakes one through the front)."""
    settings.PLUMB_RATE_SESSION = "1/m"
    session = SessionFactory()
    assert SessionRateThrottle().allow_credential(session)

    resumed = wake.Resumed(deadline=0.0, ticket="t", woken=True)
    with wake.parking(allowed=True, resumed=resumed):
        later_runs = [SessionRateThrottle().allow_credential(session) for _ in range(3)]

    assert later_runs == [True, True, True]
    # Outside a resumed run the rate holds.
    assert not SessionRateThrottle().allow_credential(session)


# --- per project key --------------------------------------------------------------------------


def test_a_key_past_its_rate_of_session_starts_is_throttled(settings, clock, project_key):
    settings.PLUMB_RATE_KEY = "2/m"
    assert start(project_key, "one").status_code == 201
    assert start(project_key, "two").status_code == 201
    before = Session.objects.count()

    response = start(project_key, "three")

    assert assert_throttled(response) == 60
    assert Session.objects.count() == before
    assert not Session.objects.filter(name__handle="three").exists()


def test_the_key_limit_applies_to_session_starts_only(settings, clock, project_key):
    settings.PLUMB_RATE_KEY = "1/h"
    settings.PLUMB_RATE_SESSION = None
    started = start(project_key, "one")
    assert started.status_code == 201
    assert_throttled(start(project_key, "two"))

    # The session that key started works on, as much as it likes: its calls
    # count against the session limit (off here), not the key's.
    session = bearer_client(started.json()["token"])
    for _ in range(10):
        assert session.get(CURRENT).status_code == 200
    assert session.post(NOTES, {"body": "still here"}, format="json").status_code == 201


def test_one_keys_limit_does_not_affect_another_key(settings, clock, project, project_key):
    settings.PLUMB_RATE_KEY = "1/h"
    other_key = ProjectKeyFactory(project=project)
    assert start(project_key, "one").status_code == 201
    assert_throttled(start(project_key, "two"))

    assert start(other_key, "two").status_code == 201
    assert_throttled(start(other_key, "three"))


def test_the_key_limit_is_off_when_set_to_none(settings, clock, project_key):
    settings.PLUMB_RATE_KEY = None

    for n in range(20):
        assert start(project_key, f"worker-{n}").status_code == 201


def test_a_refused_credential_is_answered_401_not_429(settings, clock, session_client):
    # Throttling counts credentials it has verified; a bad token is refused first.
    settings.PLUMB_RATE_SESSION = "1/h"
    assert session_client.get(CURRENT).status_code == 200
    assert_throttled(session_client.get(CURRENT))

    response = bearer_client("plumb_tok_abcdefgh_" + "A" * 43).get(CURRENT)

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_token"


# --- configuration ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("100/s", "100/s"),
        ("600/m", "600/m"),
        ("5/h", "5/h"),
        ("1/d", "1/d"),
        (" 20/s ", "20/s"),
        ("off", None),
        ("OFF", None),
    ],
)
def test_a_rate_from_the_environment_is_a_drf_rate_or_off(monkeypatch, raw, expected):
    monkeypatch.setenv("PLUMB_RATE_SESSION", raw)

    assert env_rate("PLUMB_RATE_SESSION", "100/s") == expected


def test_an_unset_rate_takes_the_default(monkeypatch):
    monkeypatch.delenv("PLUMB_RATE_KEY", raising=False)

    assert env_rate("PLUMB_RATE_KEY", "10/s") == "10/s"


@pytest.mark.parametrize("raw", ["fast", "0/s", "10", "-1/s", "10/x", "/s", "1.5/s", "10/", "s/10"])
def test_a_malformed_rate_stops_the_server_naming_the_variable(monkeypatch, raw):
    monkeypatch.setenv("PLUMB_RATE_KEY", raw)

    with pytest.raises(ImproperlyConfigured, match="PLUMB_RATE_KEY"):
        env_rate("PLUMB_RATE_KEY", "10/s")
