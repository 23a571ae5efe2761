"""SQLite's datetimes read and written in one C call each.

SQLite stores a datetime as the text Django writes (``str()`` of the naive
UTC value, ``YYYY-MM-DD HH:MM:SS[.ffffff]``). Django's converter takes that
text through ``parse_datetime``, reads ``settings.USE_TZ`` through the lazy
settings object and makes the value aware through ``make_aware``, about two
microseconds a value; the query that authenticates every call reads five, a
woken room read about twenty. Here the text goes to
``datetime.fromisoformat`` (the parser ``parse_datetime`` tries first) and
gets the connection's time zone by ``replace``, which is what ``make_aware``
does. Anything else (a value already converted, text that
``fromisoformat`` refuses) takes Django's own path.

``connection.timezone`` stands for ``settings.USE_TZ``: it is None exactly
when time zones are off, and Django forgets it when a test changes either
setting (``django.test.signals.update_connections_time_zone``).
``tests/plumb_site/test_sqlite_datetimes.py`` compares both ways value by value.

An empty dict or list in a JSON column (a message's mentions, an event's
data: most of those a send writes) is written as the text ``json.dumps``
gives it without a call into the encoder, about a hundred bytecodes each.
"""

from __future__ import annotations

import datetime

from django.db.backends.sqlite3 import operations

_UTC = datetime.UTC
# What json.dumps writes for each empty container, by exact type (a subclass may encode itself).
_EMPTY_JSON = {dict: "{}", list: "[]"}


class DatabaseOperations(operations.DatabaseOperations):
    def convert_datetimefield_value(self, value, expression, connection):
        if type(value) is str:
            try:
                parsed = datetime.datetime.fromisoformat(value)
            except ValueError:
                return super().convert_datetimefield_value(value, expression, connection)
            zone = self.connection.timezone
            if zone is not None and parsed.tzinfo is None:
                return parsed.replace(tzinfo=zone)
            return parsed
        return super().convert_datetimefield_value(value, expression, connection)

    def adapt_datetimefield_value(self, value):
        # timezone.now() and every datetime plumb makes is in UTC: made naive
        # in the connection's zone (UTC) it only loses its tzinfo.
        if (
            type(value) is datetime.datetime
            and value.tzinfo is _UTC
            and self.connection.timezone is _UTC
        ):
            return str(value.replace(tzinfo=None))
        return super().adapt_datetimefield_value(value)

    def adapt_json_value(self, value, encoder):
        if encoder is None and type(value) in _EMPTY_JSON and not value:
            return _EMPTY_JSON[type(value)]
        return super().adapt_json_value(value, encoder)
