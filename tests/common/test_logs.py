"""LOG_FORMAT=json: each record one JSON object on one line (common/logs.py).

Logging is configured here as settings configure it, with the JSON formatter
writing into a buffer, and the lines read back.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from django.test import RequestFactory

from common.logs import JsonFormatter


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    """Logger ``plumb.test`` writing through the JSON formatter into a buffer.

    Its own handler, not ``dictConfig``: that would close every handler in
    the process, pytest's own included. ``tests/plumb_site/test_settings.py``
    checks the settings' configuration in a process of its own.
    """
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("plumb.test")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield buffer
    logger.removeHandler(handler)


def read(buffer: io.StringIO) -> list[dict]:
    text = buffer.getvalue()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.split("\n")[:-1]]


def test_a_record_is_one_object_with_time_level_logger_and_message(lines):
    logging.getLogger("plumb.test").warning("%s notes pending", 3)

    [entry] = read(lines)
    assert set(entry) == {"time", "level", "logger", "message"}
    assert entry["level"] == "WARNING"
    assert entry["logger"] == "plumb.test"
    assert entry["message"] == "3 notes pending"
    assert entry["time"].endswith("Z")  # UTC, ISO 8601, milliseconds
    assert len(entry["time"]) == len("2026-12-01T16:05:40.114Z")


def test_an_exception_travels_as_its_traceback_in_the_same_line(lines):
    try:
        raise ValueError("the disk is full")
    except ValueError:
        logging.getLogger("plumb.test").exception("store failed")

    [entry] = read(lines)
    assert entry["message"] == "store failed"
    assert entry["level"] == "ERROR"
    assert entry["exception"].startswith("Traceback (most recent call last):")
    assert entry["exception"].endswith("ValueError: the disk is full")


def test_no_character_of_a_message_breaks_the_line(lines):
    logging.getLogger("plumb.test").info('one\ntwo\u2028three\r"quoted" é')

    assert len(lines.getvalue().splitlines()) == 1
    [entry] = read(lines)
    assert entry["message"] == 'one\ntwo\u2028three\r"quoted" é'


def test_a_request_log_carries_method_path_status_and_duration(lines):
    logging.getLogger("plumb.test").info(
        "GET /api/v1/notes/ 200",
        extra={"method": "GET", "path": "/api/v1/notes/", "status": 200, "duration_ms": 3.25},
    )

    [entry] = read(lines)
    assert entry["method"] == "GET"
    assert entry["path"] == "/api/v1/notes/"
    assert entry["status"] == 200
    assert entry["duration_ms"] == 3.25


def test_djangos_request_records_give_their_request_and_status(lines):
    request = RequestFactory().post("/api/v1/rooms/ops/messages/")
    logging.getLogger("plumb.test").error(
        "Internal Server Error: %s", request.path, extra={"request": request, "status_code": 500}
    )

    [entry] = read(lines)
    assert (entry["method"], entry["path"], entry["status"]) == (
        "POST",
        "/api/v1/rooms/ops/messages/",
        500,
    )


def test_values_json_cannot_hold_are_written_as_text():
    record = logging.LogRecord("plumb.test", logging.INFO, __file__, 1, "hello", None, None)
    record.path = object()

    entry = json.loads(JsonFormatter().format(record))

    assert entry["path"].startswith("<object object")
