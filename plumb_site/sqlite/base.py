"""SQLite, with write transactions queued before they ask SQLite for its lock.

SQLite lets one writer in at a time. A connection that finds the lock taken
sleeps and retries on a growing schedule (1, 2, 5, 10, ... 100 ms), so under
contention the lock sits idle between writers and a send waits hundreds of
milliseconds for a lock held for one. Here a transaction first queues for the
right to write: a lock per database within the process (a waiting thread
wakes the moment it is released) and ``flock`` on a file beside the database
across processes, polled every fraction of a millisecond. BEGIN IMMEDIATE
then finds the database free.

The queue never makes anything wait longer than SQLite would have: past the
busy timeout a writer stops queueing and leaves the decision to SQLite, which
answers "database is locked" as before. Other programs (the ``sqlite3`` shell,
a backup) do not queue and are served by SQLite's busy timeout as usual.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import threading
import time

from django.db.backends.sqlite3 import base, creation

_POLL_SECONDS = 0.0002
_guard = threading.Lock()
_queues: dict[tuple[int, str], tuple[threading.Lock, int]] = {}


def _lock_path(path: str) -> str:
    return f"{path}-writers.lock"


def _queue_for(path: str) -> tuple[threading.Lock, int]:
    # Per process: a descriptor inherited through fork() would share its
    # flock with the parent, and so would not keep the two apart.
    key = (os.getpid(), path)
    with _guard:
        queue = _queues.get(key)
        if queue is None:
            fd = os.open(_lock_path(path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            queue = _queues[key] = (threading.Lock(), fd)
        return queue


def _flock_before(fd: int, deadline: float) -> bool:
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_SECONDS)


class DatabaseCreation(creation.DatabaseCreation):
    def _destroy_test_db(self, test_database_name, verbosity):
        super()._destroy_test_db(test_database_name, verbosity)
        if not self.is_in_memory_db(test_database_name):
            with _guard:
                for key in [k for k in _queues if k[1] == str(test_database_name)]:
                    os.close(_queues.pop(key)[1])
            with contextlib.suppress(FileNotFoundError):
                os.remove(_lock_path(str(test_database_name)))


@functools.lru_cache(maxsize=512)
def _qmark(query: str) -> str:
    return base.FORMAT_QMARK_REGEX.sub("?", query).replace("%%", "%")


class CursorWrapper(base.SQLiteCursorWrapper):
    """Converts each distinct statement from ``%s`` to ``?`` style once, not per call.

    The conversion is a regular expression over the whole SQL text; for the
    long statements every request runs, it cost more than SQLite needed to
    run them.
    """

    def convert_query(self, query, *, param_names=None):
        if param_names is None:
            return _qmark(query)
        return super().convert_query(query, param_names=param_names)


class DatabaseWrapper(base.DatabaseWrapper):
    creation_class = DatabaseCreation

    def create_cursor(self, name=None):
        return self.connection.cursor(factory=CursorWrapper)

    _queued: tuple[threading.Lock | None, int | None] = (None, None)

    def _start_transaction_under_autocommit(self) -> None:
        if self.is_in_memory_db():
            return super()._start_transaction_under_autocommit()
        thread_lock, fd = _queue_for(str(self.settings_dict["NAME"]))
        timeout = float(self.settings_dict["OPTIONS"].get("timeout", 5))
        deadline = time.monotonic() + timeout
        held_thread = thread_lock.acquire(timeout=timeout)
        held_file = _flock_before(fd, deadline) if held_thread else False
        self._queued = (thread_lock if held_thread else None, fd if held_file else None)
        try:
            super()._start_transaction_under_autocommit()
        except BaseException:
            self._leave_queue()
            raise

    def _leave_queue(self) -> None:
        thread_lock, fd = self._queued
        self._queued = (None, None)
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
        if thread_lock is not None:
            thread_lock.release()

    def _commit(self) -> None:
        try:
            super()._commit()
        finally:
            self._leave_queue()

    def _rollback(self) -> None:
        try:
            super()._rollback()
        finally:
            self._leave_queue()

    def _close(self) -> None:
        try:
            super()._close()
        finally:
            self._leave_queue()
