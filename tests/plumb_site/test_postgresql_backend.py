"""A kept PostgreSQL connection is checked at each request without a round trip while its
socket is quiet, and with Django's ``SELECT 1`` otherwise (plumb_site/postgresql/)."""

from __future__ import annotations

import select

import psycopg
import pytest
from django.db import ProgrammingError, close_old_connections, connection, connections
from django.db.backends.postgresql import base as djangos_backend

from common import wake
from plumb_site.postgresql import base as plumbs_backend

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def next_request() -> int:
    """What each request does first: Django's ``request_started`` handler, then a statement."""
    close_old_connections()
    return backend_pid()


def other_connection() -> psycopg.Connection:
    """A connection of its own to the same database, as the wake-up listener opens one."""
    params = wake.postgres._listen_params("default")
    return psycopg.connect(**{**params, "application_name": "plumb-test"})


def until_readable() -> None:
    """Until the kept connection's socket has something to read (the server's last word)."""
    watch = select.poll()
    watch.register(connection.connection.fileno(), select.POLLIN)
    assert watch.poll(5_000), "the server said nothing on the connection"


@pytest.fixture
def checks(monkeypatch) -> dict[str, list[str]]:
    """The health checks made: plumb's (``quick``) and Django's ``SELECT 1`` (``select``)."""
    made: dict[str, list[str]] = {"quick": [], "select": []}
    plumbs = plumbs_backend.DatabaseWrapper.is_usable
    djangos = djangos_backend.DatabaseWrapper.is_usable

    def quick(self):
        made["quick"].append(self.alias)
        return plumbs(self)

    def select_one(self):
        made["select"].append(self.alias)
        return djangos(self)

    monkeypatch.setattr(plumbs_backend.DatabaseWrapper, "is_usable", quick)
    monkeypatch.setattr(djangos_backend.DatabaseWrapper, "is_usable", select_one)
    return made


def test_the_backend_is_plumbs_and_checks_kept_connections():
    assert isinstance(connections["default"], plumbs_backend.DatabaseWrapper)
    assert connections["default"].health_check_enabled


def test_a_quiet_kept_connection_is_checked_and_kept_without_a_round_trip(checks):
    first = backend_pid()

    assert [next_request() for _ in range(3)] == [first] * 3
    assert checks == {"quick": ["default"] * 3, "select": []}


def test_a_connection_its_server_closed_is_replaced_before_the_request_uses_it(checks):
    first = backend_pid()
    with other_connection() as other:
        other.execute("SELECT pg_terminate_backend(%s)", [first])
    until_readable()

    assert next_request() != first
    assert checks == {"quick": ["default"], "select": ["default"]}


def test_a_kept_connection_with_something_to_read_is_asked_and_kept(checks):
    first = backend_pid()
    with connection.cursor() as cursor:
        cursor.execute("LISTEN plumb_test_backend")
    try:
        with other_connection() as other:
            other.execute("NOTIFY plumb_test_backend")
        until_readable()

        assert next_request() == first
        assert checks == {"quick": ["default"], "select": ["default"]}
    finally:
        with connection.cursor() as cursor:
            cursor.execute("UNLISTEN plumb_test_backend")


def test_a_connection_after_an_error_is_asked_with_select_one(checks):
    first = backend_pid()
    # An error that may leave a connection unusable (not a DataError or an IntegrityError).
    with pytest.raises(ProgrammingError), connection.cursor() as cursor:
        cursor.execute("SELECT * FROM plumb_no_such_table")
    assert connection.errors_occurred

    assert next_request() == first
    assert checks["select"] == ["default"]
