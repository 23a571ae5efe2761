"""plumb's SQLite converter and adapters (datetimes, JSON) give what Django's give, value by value.

They run on a connection of the test's own SQLite file, so they run whichever
database the rest of the suite uses.
"""

from __future__ import annotations

import collections
import datetime
import json
import zoneinfo

import pytest
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection
from django.db.backends.sqlite3.operations import DatabaseOperations as DjangoOperations
from django.test import override_settings

from plumb_site.sqlite.operations import DatabaseOperations
from tests.plumb_site.sqlite_queue import _wrapper

UTC = datetime.UTC
PARIS = zoneinfo.ZoneInfo("Europe/Paris")
ZONEINFO_UTC = zoneinfo.ZoneInfo("UTC")  # UTC, but not datetime.UTC
NAIVE = datetime.datetime(2026, 12, 3, 12, 31, 38)  # noqa: DTZ001 - naive on purpose

STORED = [
    "2026-12-03 12:31:38.160359",  # what Django writes
    "2026-12-03 12:31:38",  # microsecond 0: str() leaves it out
    "2026-12-03T12:31:38.5",  # ISO, as raw SQL or another program may write
    "2026-12-03 12:31:38+02:00",  # with an offset: stays at that offset
    "2026-12-03 12:31:38Z",
    "2026-12-3 1:02",  # fromisoformat refuses; Django's regex takes it
    "2026-12-03 12:31:38,25",
    "not a date",  # neither: Django's answer (None)
    None,
    NAIVE,  # already converted
    datetime.datetime(2026, 12, 3, 12, 31, 38, tzinfo=PARIS),
]

GIVEN = [
    NAIVE,
    datetime.datetime(2026, 12, 3, 12, 31, 38, 160359, tzinfo=UTC),  # timezone.now()
    datetime.datetime(2026, 12, 3, 12, 31, 38, tzinfo=UTC),  # str() leaves microsecond 0 out
    datetime.datetime(2026, 12, 3, 13, 31, 38, tzinfo=PARIS),
    datetime.datetime(2026, 12, 3, 12, 31, 38, tzinfo=ZONEINFO_UTC),
    None,
]


@pytest.fixture
def both(tmp_path, settings):
    wrapper = _wrapper(str(tmp_path / "dates.sqlite3"))

    def pair(use_tz: bool):
        settings.USE_TZ = use_tz
        # What django.test.signals.update_connections_time_zone does for the
        # connections Django holds; this one is the test's own.
        wrapper.__dict__.pop("timezone", None)
        return DatabaseOperations(wrapper), DjangoOperations(wrapper)

    yield pair
    wrapper.close()


def _outcome(call):
    try:
        value = call()
    except Exception as error:  # the error is the answer compared
        return ("raises", type(error))
    return ("is", value, getattr(value, "tzinfo", None))


@pytest.mark.parametrize("use_tz", [True, False])
@pytest.mark.parametrize("stored", STORED, ids=repr)
def test_a_stored_value_reads_as_djangos_converter_reads_it(both, use_tz, stored):
    ours, django = both(use_tz)
    assert _outcome(lambda: ours.convert_datetimefield_value(stored, None, None)) == _outcome(
        lambda: django.convert_datetimefield_value(stored, None, None)
    )


@pytest.mark.parametrize("use_tz", [True, False])
@pytest.mark.parametrize("given", GIVEN, ids=repr)
def test_a_value_is_written_as_djangos_adapter_writes_it(both, use_tz, given):
    ours, django = both(use_tz)
    assert _outcome(lambda: ours.adapt_datetimefield_value(given)) == _outcome(
        lambda: django.adapt_datetimefield_value(given)
    )


def test_django_forgets_a_connections_time_zone_when_use_tz_changes(db):
    """What the converter leans on to stand ``connection.timezone`` for ``USE_TZ``."""
    assert connection.timezone is UTC
    with override_settings(USE_TZ=False):
        assert connection.timezone is None
    assert connection.timezone is UTC


def test_plumbs_sqlite_backend_uses_them(tmp_path):
    wrapper = _wrapper(str(tmp_path / "dates.sqlite3"))
    assert type(wrapper.ops) is DatabaseOperations


class _EmptyDict(dict):
    pass


class _ItsOwnEmpty(json.JSONEncoder):
    def encode(self, o):
        return "null" if o in ({}, []) else super().encode(o)


JSON_GIVEN = [
    {},
    [],
    {"unseen_before_send": 0, "unresolved_mentions": []},
    ["ann"],
    collections.OrderedDict(),
    _EmptyDict(),
    (),
    "",
    0,
    None,
    {"é": "\u2028"},
]


@pytest.mark.parametrize("encoder", [None, DjangoJSONEncoder, _ItsOwnEmpty])
@pytest.mark.parametrize("given", JSON_GIVEN, ids=repr)
def test_a_json_value_is_written_as_djangos_adapter_writes_it(both, given, encoder):
    ours, django = both(True)
    assert _outcome(lambda: ours.adapt_json_value(given, encoder)) == _outcome(
        lambda: django.adapt_json_value(given, encoder)
    )


def test_an_empty_container_is_written_without_the_encoder(both, monkeypatch):
    ours, _ = both(True)
    monkeypatch.setattr(json, "dumps", None)  # any call into it fails
    assert (ours.adapt_json_value({}, None), ours.adapt_json_value([], None)) == ("{}", "[]")
