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
