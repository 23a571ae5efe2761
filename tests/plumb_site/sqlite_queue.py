"""Connections of plumb's SQLite backend to a file of the test's own, and the threads,
locks and counters the SQLite backend tests share (``tests/plumb_site/test_sqlite_*.py``).

Processes spawned by test_sqlite_writer_queue.py import this module before any Django
app is loaded: nothing here may import a model.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator

from django.db.utils import ConnectionHandler
from prometheus_client import REGISTRY

from plumb_site.sqlite import base as queue_backend

TIMEOUT = 20  # seconds any one step may take before a test gives up


def _handler(path: str, timeout: float = 10) -> ConnectionHandler:
    return ConnectionHandler(
        {
            "default": {
                "ENGINE": "plumb_site.sqlite",
                "NAME": path,
                "OPTIONS": {
                    "transaction_mode": "IMMEDIATE",
                    "timeout": timeout,
                    "init_command": "PRAGMA journal_mode=WAL;",
                },
            }
        }
    )


def _wrapper(path: str, timeout: float = 10):
    return _handler(path, timeout)["default"]


def _write_in_transaction(wrapper, sql: str) -> None:
    """What ``transaction.atomic()`` does with the wrapper, minus the savepoint machinery."""
    wrapper.ensure_connection()
    wrapper._start_transaction_under_autocommit()
    with wrapper.cursor() as cursor:
        cursor.execute(sql)
    wrapper.commit()


def _create(path: str) -> str:
    wrapper = _wrapper(path)
    with wrapper.cursor() as cursor:
        cursor.execute("CREATE TABLE counter (n INTEGER NOT NULL)")
        cursor.execute("INSERT INTO counter (n) VALUES (0)")
    wrapper.close()
    return path


@contextlib.contextmanager
def _held_elsewhere(path: str) -> Iterator[int]:
    """The queue file locked through a descriptor of its own, as another process would.

    ``flock`` belongs to the open file description, so a second ``open()`` in
    this process conflicts with the queue's exactly as another process does.
    """
    fd = os.open(f"{path}-writers.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        yield fd
    finally:
        os.close(fd)  # releases the lock


def _in_queue(ident: int | None) -> bool:
    """Whether the thread ``ident`` is inside ``WriterQueue.enter`` (as tests/races.py reads it)."""
    frame = sys._current_frames().get(ident) if ident is not None else None
    while frame is not None:
        if frame.f_code is queue_backend.WriterQueue.enter.__code__:
            return True
        frame = frame.f_back
    return False


def _wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {TIMEOUT} s"
        time.sleep(0.002)


class _Writer(threading.Thread):
    """Runs ``action`` on a thread of its own; keeps its error for the test."""

    def __init__(self, action: Callable[[], None]) -> None:
        super().__init__(daemon=True)
        self.action = action
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.action()
        except BaseException as exc:  # re-raised by finish()
            self.error = exc

    def finish(self) -> None:
        self.join(TIMEOUT)
        assert not self.is_alive(), f"the writer did not finish within {TIMEOUT} s"
        if self.error is not None:
            raise self.error


def _count(path: str) -> int:
    wrapper = _wrapper(path)
    with wrapper.cursor() as cursor:
        cursor.execute("SELECT n FROM counter")
        (n,) = cursor.fetchone()
    wrapper.close()
    return n


def _writer_waits() -> tuple[float, float]:
    """(count, sum) of plumb_sqlite_writer_wait_seconds in this process."""
    count = REGISTRY.get_sample_value("plumb_sqlite_writer_wait_seconds_count") or 0.0
    return count, REGISTRY.get_sample_value("plumb_sqlite_writer_wait_seconds_sum") or 0.0
