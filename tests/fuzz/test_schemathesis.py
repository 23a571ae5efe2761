"""Fuzz every operation of the published OpenAPI document with schemathesis.

Each operation of ``/api/v1/schema/`` becomes one test, fed by schemathesis
with valid and invalid path parameters, query strings and bodies (its
coverage phase, then a fixed number of Hypothesis examples, derandomized so
that a run is repeatable). Every response must:

* not be a server error (no 5xx, whatever the input);
* have a status code the operation documents;
* have the content type the operation documents for that status;
* conform to the schema documented for that status, error responses included.

Requests go straight into the WSGI application, inside the test's database
transaction, authenticated with a real session token (or the project key for
``POST /sessions/``). A room with a message and a conversation are seeded, and
half the generated path parameters are replaced by their ids, so the fuzzer
reaches real objects and not only 404s.
"""

import itertools
import os
import time
from collections import Counter

import hypothesis
import pytest
import schemathesis
from hypothesis import HealthCheck
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

import mailbox.wakeups
from plumb_site.wsgi import application
from tests.conftest import connection_kept
from tests.factories import SessionFactory

# Loaded at collection, so that each operation is a test of its own. The schema
# view reads no database, so this needs none.
schema = schemathesis.openapi.from_wsgi("/api/v1/schema/", application)

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
# Bounded so that the whole run stays around a minute in CI; raise it locally
# for a deeper search (PLUMB_FUZZ_EXAMPLES=500 pytest tests/fuzz).
MAX_EXAMPLES = int(os.environ.get("PLUMB_FUZZ_EXAMPLES", "40"))

# Ids of the seeded objects, by path parameter name; filled by the ``world``
# fixture before any case is drawn (strategies read it lazily, at draw time).
REAL_IDS: dict[str, str] = {}


@schema.hook
def flatmap_path_parameters(context, path_parameters):
    """Half the generated cases name the seeded room, message or conversation."""
    if not path_parameters:
        return st.just(path_parameters)

    def choose(use_real: bool) -> dict:
        if not use_real:
            return path_parameters
        return {name: REAL_IDS.get(name, value) for name, value in path_parameters.items()}

    return st.booleans().map(choose)


# Body fields that name something the seeded world has: half the generated cases
# use it. The seeded room's head is 2 (the creator's join and one message), so a
# read position of 1 is one it accepts; a random integer almost never is.
REAL_BODY_VALUES = {"workspace": "main", "seq": 1}


@schema.hook
def flatmap_body(context, body):
    """Half the generated session starts name the seeded workspace, half the read moves a seq."""
    if not isinstance(body, dict) or not REAL_BODY_VALUES.keys() & body.keys():
        return st.just(body)

    def choose(use_real: bool) -> dict:
        if not use_real:
            return body
        return {**body, **{k: v for k, v in REAL_BODY_VALUES.items() if k in body}}

    return st.booleans().map(choose)


class _JumpingClock:
    """``time.monotonic`` for the waiting calls: a minute passes between two readings.

    A generated ``wait`` of up to 30 seconds (notes, room reads, activity)
    would otherwise hold the run that long; with this clock a call checks once
    and returns.
    """

    def __init__(self):
        self._ticks = itertools.count(step=60)

    def monotonic(self) -> float:
        return float(next(self._ticks))

    # Wall-clock time (the expiry of a waiting call's ticket) runs as it does.
    time = staticmethod(time.time)


@pytest.fixture
def world(settings, monkeypatch, workspace, project_key, agent_session, session_client):
    settings.PLUMB_RATE_SESSION = None
    settings.PLUMB_RATE_KEY = None
    monkeypatch.setattr(mailbox.wakeups, "time", _JumpingClock())

    created = session_client.post("/api/v1/rooms/", {"slug": "dev"}, format="json")
    assert created.status_code == 201, created.content
    sent = session_client.post("/api/v1/rooms/dev/messages/", {"body": "hello"}, format="json")
    assert sent.status_code == 201, sent.content
    left = session_client.post("/api/v1/notes/", {"body": "to the next"}, format="json")
    assert left.status_code == 201, left.content
    REAL_IDS.update(
        slug="dev",
        message_id=sent.json()["message"]["id"],
        conversation_id=left.json()["conversation_id"],
    )
    state = {
        "key": project_key,
        "workspace": workspace,
        "session": agent_session,
        "statuses": Counter(),
        "operation": "",
    }
    yield state
    REAL_IDS.clear()

    statuses = state["statuses"]
    summary = ", ".join(f"{code}: {n}" for code, n in sorted(statuses.items()))
    cases = sum(statuses.values())
    print(f"\n[fuzz] {state['operation']}: {cases} cases; statuses {summary}", flush=True)
    # A run that never got past authentication or the 404s fuzzed nothing.
    assert any(200 <= code < 300 for code in statuses), statuses


def _token(case, world: dict) -> str:
    if case.path.rstrip("/") == "/api/v1/sessions":
        return world["key"].raw_key
    session = world["session"]
    session.refresh_from_db(fields=["ended_at"])
    if session.ended_at is not None:
        # DELETE /sessions/current/ ended it; the next case needs a live one.
        session = SessionFactory(workspace=world["workspace"], name="alice")
        world["session"] = session
    return session.raw_token


@schema.parametrize()
@hypothesis.settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    # The seeded world is set up once per operation and shared by its cases,
    # on purpose: state left by one case (a joined room, a sent message) is
    # input for the next.
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_every_response_is_documented_and_no_input_makes_a_server_error(case, world):
    world["operation"] = case.operation.label
    token = _token(case, world)
    with connection_kept():
        response = case.call(headers={"Authorization": f"Bearer {token}"})
    if case.method == case.operation.method.upper():
        # Not the coverage phase's probes with other methods (405, or OPTIONS).
        world["statuses"][response.status_code] += 1
    case.validate_response(response, checks=CHECKS)
