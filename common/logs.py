"""Log lines as JSON objects (``LOG_FORMAT=json``), one per line.

Log collectors then read fields instead of parsing text: ``time`` (UTC, ISO
8601), ``level``, ``logger``, ``message``, ``exception`` (the traceback)
when there is one, and for a request's log line ``method``, ``path``,
``status`` and ``duration_ms``. Those come from attributes of the record:
set directly (``extra=``; gunicorn's access log gets them from
``plumb_site/gunicorn_config.py``) or, for Django's ``django.request``
records, read from the request they carry. Non-ASCII characters are escaped,
so that no character of a message can break the line.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

# Attributes a record may carry about the request it reports, in output order.
REQUEST_FIELDS = ("method", "path", "status", "duration_ms")


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, tz=UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(request_fields(record))
        if record.exc_info:
            # Formatter caches the text on the record, as the plain format does.
            record.exc_text = record.exc_text or self.formatException(record.exc_info)
        if record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str)


def request_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The request fields a record carries, from its attributes or its Django request."""
    fields = {name: getattr(record, name) for name in REQUEST_FIELDS if hasattr(record, name)}
    request = getattr(record, "request", None)
    if request is not None:
        fields.setdefault("method", getattr(request, "method", None))
        fields.setdefault("path", getattr(request, "path", None))
    if hasattr(record, "status_code"):
        fields.setdefault("status", record.status_code)
    return {name: value for name, value in fields.items() if value is not None}


class BoundedLog:
    """Lines of one kind, at most one per ``interval`` seconds; the rest are counted.

    For an error that may repeat thousands of times a second (a flood of
    connections, a full file table): the first is written at once, those
    that follow within ``interval`` are only counted, and the next line
    written says how many it stands for. A burst's last count waits for the
    next line of its kind; a metric that counts every one gives the exact
    figure at any time.
    """

    def __init__(
        self,
        write: Callable[..., object],
        *,
        interval: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._write = write
        self._interval = interval
        self._clock = clock
        self._last: float | None = None
        self._held = 0

    def __call__(self, message: str, *args: object) -> None:
        now = self._clock()
        if self._last is not None and now - self._last < self._interval:
            self._held += 1
            return
        if self._held:
            message += " (and %d more like it in the last %.0f s)"
            args = (*args, self._held, now - self._last)
        self._last, self._held = now, 0
        self._write(message, *args)
