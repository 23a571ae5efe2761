"""PostgreSQL's timestamps read in C give what Django's own loader gives (plumb_site/pgtimes.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import DataError, connection, transaction
from django.db.backends.postgresql.psycopg_any import register_tzloader
from django.utils import timezone
from psycopg.pq import Format

from plumb_site.pgtimes import UtcTimestampLoader
from tests.factories import SessionFactory

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db]

LITERALS = [
    "2026-12-04 07:03:37.123456+00",
    "2026-12-04 07:03:37.12+00",
    "2026-12-04 07:03:37+00",
    "2026-12-04 07:03:37.000001+00",
    "0001-01-01 00:00:00+00",
    "9999-12-31 23:59:59.999999+00",
    "1970-01-01 00:00:00+00",
    "2024-02-29 12:00:00+05:30",
    "infinity",
    "-infinity",
    "0044-03-15 12:00:00+00 BC",
    "12026-01-01 00:00:00+00",
]


def read(literals: list[str], *, djangos: bool, zone: str = "UTC") -> list[object]:
    """Each literal as a timestamptz read back, or the class of the error reading it."""
    answers: list[object] = []
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT set_config('TimeZone', %s, true)", [zone])
        if djangos:
            register_tzloader(connection.timezone, cursor.cursor)
        for literal in literals:
            try:
                with transaction.atomic():
                    cursor.execute("SELECT %s::timestamptz", [literal])
                    answers.append(cursor.fetchone()[0])
            except DataError as error:
                answers.append(type(error))
    return answers


def test_every_connection_reads_timestamps_with_it():
    connection.ensure_connection()

    loader = connection.connection.adapters.get_loader(
        connection.connection.adapters.types["timestamptz"].oid, Format.TEXT
    )

    assert loader is UtcTimestampLoader


def test_it_reads_every_timestamp_as_djangos_loader_does():
    ours = read(LITERALS, djangos=False)

    assert ours == read(LITERALS, djangos=True)
    assert ours[0] == datetime(2026, 12, 4, 7, 3, 37, 123456, tzinfo=UTC)
    assert all(a.tzinfo is UTC for a in ours if isinstance(a, datetime))
    assert DataError in ours  # infinity, as Django refuses it


def test_a_session_in_another_time_zone_still_reads_as_djangos_loader_does():
    ours = read(LITERALS, djangos=False, zone="Asia/Kolkata")

    assert ours == read(LITERALS, djangos=True, zone="Asia/Kolkata")


def test_a_model_round_trips_its_times():
    session = SessionFactory(last_seen_at=timezone.now())

    stored = type(session).objects.get(pk=session.pk)

    assert stored.last_seen_at == session.last_seen_at
    assert stored.last_seen_at.tzinfo is UTC
    assert stored.started_at == session.started_at
