"""PostgreSQL's timestamps read by Python's own parser, in C, rather than in Python.

psycopg reads a ``timestamptz`` in C, but Django registers a loader of its own
on every connection (``BaseTzLoader``, to give the values Django's time
zone) and that one extends psycopg's Python loader: a regular expression and
a dozen conversions in Python for every timestamp a query returns, about 700
bytecodes of a room send (its message, its event, its session) and more for
each page of events read.

With ``USE_TZ`` and Django's time zone UTC (plumb's settings), Django sets
every connection's ``TimeZone`` to UTC, so PostgreSQL writes each timestamp
as ISO 8601 with ``+00``, which ``datetime.fromisoformat`` reads in C into
the very value Django's loader gives (``timezone.utc`` is its time zone).
Anything else (``infinity``, a year past 9999 or before 1, an offset other
than zero because a session changed its time zone) goes to Django's loader,
which answers or refuses it. ``tests/plumb_site/test_pgtimes.py`` holds the
two to the same answers.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db.backends.signals import connection_created

try:
    from django.db.backends.postgresql.psycopg_any import BaseTzLoader, is_psycopg3
except ImportError:  # no psycopg installed: nothing to read
    BaseTzLoader, is_psycopg3 = object, False


class UtcTimestampLoader(BaseTzLoader):  # type: ignore[misc, valid-type]
    # Django's check before each cursor (``create_cursor``) finds its own time zone here.
    timezone = UTC

    def load(self, data: Any) -> datetime:
        try:
            value = datetime.fromisoformat(bytes(data).decode())
        except ValueError:
            return super().load(data)
        if value.tzinfo is UTC:
            return value
        return super().load(data)


def _read_in_c(sender: Any, connection: Any, **kwargs: Any) -> None:
    if connection.vendor == "postgresql" and is_psycopg3 and connection.timezone is UTC:
        connection.connection.adapters.register_loader("timestamptz", UtcTimestampLoader)


def install() -> None:
    connection_created.connect(_read_in_c, dispatch_uid="plumb_site.pgtimes")
