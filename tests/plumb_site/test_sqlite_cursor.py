"""plumb's SQLite cursor wrapper answers every call as Django's own wrapper does.

Each case runs twice, each time on a new database file of the same rows:
once through ``StatementCursor``, once through Django's ``CursorWrapper``
around the same kind of raw cursor. The outcomes (the value, or the
exception's type, its cause's type, its text and what it did to the
connection) must be equal.
"""

from __future__ import annotations

import sqlite3
import warnings

import pytest
from django.apps import apps
from django.db import IntegrityError, OperationalError
from django.db.backends import utils
from django.db.transaction import TransactionManagementError
from django.test.utils import CaptureQueriesContext

from plumb_site.sqlite.base import StatementCursor
from tests.plumb_site.sqlite_queue import _wrapper

pytestmark = pytest.mark.usefixtures("own_database_allowed")


@pytest.fixture
def new_wrapper(tmp_path):
    made = []

    def new():
        wrapper = _wrapper(str(tmp_path / f"cursor{len(made)}.sqlite3"))
        made.append(wrapper)
        with wrapper.cursor() as cursor:
            cursor.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT UNIQUE, n INTEGER)")
            cursor.execute("INSERT INTO t (name, n) VALUES ('a', 1), ('b', 2), ('c', 3)")
        wrapper.connection.create_function("boom", 1, _boom)
        return wrapper

    yield new
    for wrapper in made:
        wrapper.close()


@pytest.fixture
def wrapper(new_wrapper):
    return new_wrapper()


def _boom(n):
    if n >= 2:
        raise ValueError("boom")
    return n


def _django(wrapper):
    return utils.CursorWrapper(wrapper.create_cursor(), wrapper)


def _ours(wrapper):
    return StatementCursor(wrapper.create_cursor(), wrapper)


def _outcome(wrapper, make, steps):
    wrapper.errors_occurred = False
    cursor = make(wrapper)
    try:
        value = steps(cursor)
    except Exception as exc:  # the exception is the answer compared
        cause = type(exc.__cause__) if exc.__cause__ is not None else None
        return ("raises", type(exc), cause, str(exc), wrapper.errors_occurred)
    finally:
        cursor.close()
    return ("is", value, wrapper.errors_occurred)


def _select_list(c):
    c.execute("SELECT name FROM t WHERE n >= %s ORDER BY n", [2])
    return c.fetchall()


def _select_tuple(c):
    c.execute("SELECT name FROM t WHERE n = %s", (1,))
    return c.fetchone()


def _select_none(c):
    c.execute("SELECT count(*) FROM t")
    return c.fetchone()


def _select_named(c):
    c.execute("SELECT name FROM t WHERE n = %(n)s", {"n": 3})
    return c.fetchall()


def _fetch_many(c):
    c.execute("SELECT n FROM t ORDER BY n")
    return c.fetchmany(2), c.fetchmany(size=5)


def _iterate(c):
    c.execute("SELECT n FROM t ORDER BY n")
    return list(c)


def _insert(c):
    c.execute("INSERT INTO t (name, n) VALUES (%s, %s)", ["d", 4])
    return c.lastrowid, c.rowcount


def _percent(c):
    c.execute("SELECT '100%%' || %s", ["!"])
    return c.fetchone()


def _unique(c):
    c.execute("INSERT INTO t (name, n) VALUES (%s, %s)", ["a", 9])


def _syntax(c):
    c.execute("SELEC nothing")


def _no_table(c):
    c.execute("SELECT * FROM missing WHERE x = %s", [1])


def _fails_at_execute(c):
    c.execute("SELECT boom(n) FROM t WHERE n = %s", [2])


def _fails_at_fetchall(c):
    c.execute("SELECT boom(n) FROM t")  # no sort: each row is made as it is fetched
    return c.fetchall()


def _fails_at_fetchone(c):
    c.execute("SELECT boom(n) FROM t")  # no sort: each row is made as it is fetched
    return c.fetchone(), c.fetchone()


def _fails_at_fetchmany(c):
    c.execute("SELECT boom(n) FROM t")  # no sort: each row is made as it is fetched
    return c.fetchmany(3)


def _wrong_count(c):
    c.execute("SELECT name FROM t WHERE n = %s", [1, 2])


def _executemany(c):
    c.executemany("INSERT INTO t (name, n) VALUES (%s, %s)", [["e", 5], ["f", 6]])
    return c.rowcount


CASES = [
    _select_list,
    _select_tuple,
    _select_none,
    _select_named,
    _fetch_many,
    _iterate,
    _insert,
    _percent,
    _unique,
    _syntax,
    _no_table,
    _fails_at_execute,
    _fails_at_fetchall,
    _fails_at_fetchone,
    _fails_at_fetchmany,
    _wrong_count,
    _executemany,
]


@pytest.mark.parametrize("steps", CASES, ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize("in_transaction", [False, True])
def test_a_call_answers_as_through_djangos_wrapper(new_wrapper, steps, in_transaction):
    outcomes = []
    for make in (_django, _ours):
        wrapper = new_wrapper()
        if in_transaction:
            wrapper.set_autocommit(False)
        outcomes.append(_outcome(wrapper, make, steps))
    assert outcomes[1] == outcomes[0]


def test_errors_are_djangos_raised_from_sqlite3s(wrapper):
    """What callers catch: Django's classes, sqlite3's error as the cause."""
    outcomes = [_outcome(wrapper, _ours, s) for s in (_unique, _syntax, _fails_at_fetchall)]
    assert [o[1:3] for o in outcomes] == [
        (IntegrityError, sqlite3.IntegrityError),
        (OperationalError, sqlite3.OperationalError),
        (OperationalError, sqlite3.OperationalError),
    ]
    # Django marks the connection for a health check after any error but these two kinds.
    assert [o[-1] for o in outcomes] == [False, True, True]


def test_the_backend_makes_it_unless_queries_are_logged(wrapper):
    with wrapper.cursor() as cursor:
        assert type(cursor) is StatementCursor
    with CaptureQueriesContext(wrapper) as captured, wrapper.cursor() as cursor:
        assert type(cursor) is utils.CursorDebugWrapper
        cursor.execute("SELECT %s", [1])
    assert [q["sql"] for q in captured.captured_queries] == ["SELECT 1"]


def test_a_broken_transaction_is_refused_before_the_statement(wrapper):
    wrapper.set_autocommit(False)
    wrapper.in_atomic_block = True
    wrapper.needs_rollback = True
    try:
        with wrapper.cursor() as cursor, pytest.raises(TransactionManagementError):
            cursor.execute("INSERT INTO t (name, n) VALUES (%s, %s)", ["z", 26])
    finally:
        wrapper.needs_rollback = False
        wrapper.in_atomic_block = False
        wrapper.rollback()
        wrapper.set_autocommit(True)
    with wrapper.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM t WHERE name = 'z'")
        assert cursor.fetchone() == (0,)


def test_an_execute_wrapper_sees_every_statement(wrapper):
    seen = []

    def spy(execute, sql, params, many, context):
        seen.append((sql, params, many, type(context["cursor"])))
        return execute(sql, params, many, context)

    with wrapper.execute_wrapper(spy), wrapper.cursor() as cursor:
        cursor.execute("SELECT name FROM t WHERE n = %s", [2])
        assert cursor.fetchall() == [("b",)]
    assert seen == [("SELECT name FROM t WHERE n = %s", [2], False, StatementCursor)]


def test_before_the_apps_are_ready_it_warns_as_django_does(wrapper, monkeypatch):
    monkeypatch.setattr(apps, "ready", False)
    monkeypatch.setattr(apps, "stored_app_configs", [])
    with warnings.catch_warnings(record=True) as caught, wrapper.cursor() as cursor:
        warnings.simplefilter("always")
        cursor.execute("SELECT 1")
    assert [str(w.message) for w in caught] == [utils.CursorWrapper.APPS_NOT_READY_WARNING_MSG]


def test_every_error_django_wraps_on_fetching_is_wrapped_here():
    """The fetch methods defined here are those Django wraps on access (but nextset,
    which sqlite3's cursor does not have)."""
    defined = {name for name in vars(StatementCursor) if name.startswith(("fetch", "next"))}
    assert defined == utils.CursorWrapper.WRAP_ERROR_ATTRS - {"nextset"}
    assert not hasattr(sqlite3.Cursor, "nextset")
