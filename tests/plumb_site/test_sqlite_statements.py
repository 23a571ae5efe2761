"""How plumb's SQLite cursor reads statements: converted to sqlite3's parameter style as
Django converts them, once each (cached), and writes told from reads, which decides what
queues.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime

import pytest
from django.db.backends.sqlite3.base import SQLiteCursorWrapper

from plumb_site.sqlite import base as queue_backend
from tests.plumb_site.sqlite_queue import _wrapper

pytestmark = pytest.mark.usefixtures("own_database_allowed")


@pytest.mark.parametrize(
    "query",
    [
        "SELECT 1",
        'SELECT "a" FROM "t" WHERE "b" = %s AND "c" IN (%s, %s)',
        "SELECT '100%%' || %s, '%%s' FROM t WHERE x LIKE %s ESCAPE '\\'",
    ],
)
def test_statements_convert_as_djangos_do_and_once(query):
    raw = sqlite3.connect(":memory:")
    ours = raw.cursor(factory=queue_backend.CursorWrapper)
    theirs = raw.cursor(factory=SQLiteCursorWrapper)
    queue_backend._qmark.cache_clear()

    assert ours.convert_query(query) == theirs.convert_query(query)
    assert ours.convert_query(query) == theirs.convert_query(query)
    assert queue_backend._qmark.cache_info().hits == 1
    named = "SELECT %(a)s, %(b)s"
    assert ours.convert_query(named, param_names=["a", "b"]) == "SELECT :a, :b"
    raw.close()


def test_plumb_queries_go_through_the_cached_conversion(database):
    wrapper = _wrapper(database)
    queue_backend._qmark.cache_clear()
    for _ in range(3):
        with wrapper.cursor() as cursor:
            cursor.execute("SELECT n FROM counter WHERE n >= %s", [0])
            assert cursor.fetchone() == (0,)
    wrapper.close()

    assert queue_backend._qmark.cache_info().hits == 2


@pytest.mark.parametrize(
    ("sql", "writes"),
    [
        ("SELECT n FROM counter", False),
        ('SELECT "updated_at", "deleted" FROM t', False),
        ("WITH c AS (SELECT 1) SELECT * FROM c", False),
        ("PRAGMA foreign_keys", False),
        ("EXPLAIN QUERY PLAN SELECT 1", False),
        ("BEGIN IMMEDIATE", False),
        ("SAVEPOINT s1", False),
        ("RELEASE SAVEPOINT s1", False),
        ('UPDATE "t" SET "a" = %s', True),
        ("  insert into t values (1)", True),
        ("DELETE FROM t", True),
        ("REPLACE INTO t VALUES (1)", True),
        ("/* why */ UPDATE t SET a = 1", True),
        ("-- why\nDELETE FROM t", True),
        ("WITH c AS (SELECT 1) UPDATE t SET a = 1", True),
        ("CREATE TABLE t (a)", True),
        ("DROP TABLE t", True),
        ("ALTER TABLE t ADD b", True),
    ],
)
def test_statements_that_write_are_told_from_reads(sql, writes):
    assert queue_backend._writes(sql) is writes


def test_values_come_as_sqlite_stores_them_and_the_orm_converts_them_once(tmp_path):
    """No converters by declared type (``get_connection_params``): raw SQL reads text for
    a datetime and 0 or 1 for a boolean; the ORM's own converters make them Python's."""
    wrapper = _wrapper(str(tmp_path / "types.sqlite3"))
    try:
        with wrapper.cursor() as cursor:
            cursor.execute("CREATE TABLE t (at datetime NOT NULL, flag bool NOT NULL)")
            cursor.execute("INSERT INTO t VALUES ('2026-12-02 10:44:18.123456', 1)")
            cursor.execute("SELECT at, flag FROM t")
            assert cursor.fetchone() == ("2026-12-02 10:44:18.123456", 1)
        ops = wrapper.ops
        at = ops.convert_datetimefield_value("2026-12-02 10:44:18.123456", None, wrapper)
        assert at == datetime(2026, 12, 2, 10, 44, 18, 123456, tzinfo=UTC)
        assert ops.convert_booleanfield_value(1, None, wrapper) is True
    finally:
        wrapper.close()
