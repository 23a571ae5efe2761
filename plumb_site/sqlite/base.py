"""SQLite, with writers queued before they ask SQLite for its lock.

SQLite lets one writer in at a time. A connection that finds the lock taken
sleeps and retries on a growing schedule (1, 2, 5, 10, ... 100 ms), so under
contention the lock sits idle between writers and a send waits hundreds of
milliseconds for a lock held for one. Here every write first queues for the
right to write: a lock per database within the process (a waiting thread
wakes the moment it is released), then ``flock`` on a file beside the
database across processes. A process that finds the file locked waits on a
FIFO beside it, into which every releaser writes a byte, so it wakes as soon
as the lock is free (and re-checks every few milliseconds in case a holder
died before it could write). SQLite then finds the database free.

A transaction (``atomic()``) queues before its BEGIN IMMEDIATE and keeps its
turn until it commits or rolls back. A statement that writes outside a
transaction (Django's autocommit: the delivery claim, ``session_touch``,
``key_touch``, ``read_advance``) is a transaction of its own to SQLite and
queues for the statement alone. Reads never queue.

Past the busy timeout (``OPTIONS["timeout"]``, 30 s in plumb's settings) a
writer stops queueing and asks SQLite anyway, and SQLite then waits up to
that same timeout again, on its own schedule, before it answers "database
is locked". So a writer behind a transaction that does not end waits up to
twice the timeout where plain SQLite would have waited it once; behind a
process that holds the queue file but not SQLite's lock (stuck between two
writes), it waits one timeout and then writes. A writer that gave up on the
file still holds its process's turn until it is done, so the other writers
of its process stay behind it. Other programs (the ``sqlite3`` shell, a
backup) do not queue and are served by SQLite's busy timeout as usual.

The queue's two files are opened without following links, and a file of the
wrong kind in their place is refused (``ImproperlyConfigured``).

The hooks overridden here are private Django API (the connection's
``_start_transaction_under_autocommit``, ``_commit``, ``_rollback``,
``_close``, ``create_cursor`` and ``make_cursor``; the cursor's ``execute``,
``executemany`` and ``convert_query``; the test database's
``_destroy_test_db``): ``tests/plumb_site/test_sqlite_django_hooks.py`` pins
how Django calls them, and ``tests/plumb_site/test_sqlite_cursor.py`` holds
``StatementCursor`` to Django's ``CursorWrapper``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import os
import re
import select
import stat
import threading
import time

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.db.backends import utils
from django.db.backends.sqlite3 import base, creation

from common import metrics
from plumb_site.sqlite.operations import DatabaseOperations

# Longest sleep between two looks at the lock file when no wake-up came.
_NAP_SECONDS = 0.005
_guard = threading.Lock()


def _open_own(path: str, flags: int, kind: str) -> int:
    """Open one of the queue's files, refusing a link or a file of another kind in its place.

    Followed, a link planted there would have plumb create, lock or wait on
    a file elsewhere; a file of the wrong kind would never work as the queue.
    """
    # Non-blocking, so that opening a FIFO or a device found there cannot hang.
    flags |= os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        if exc.errno != errno.ELOOP or not stat.S_ISLNK(os.lstat(path).st_mode):
            raise
        found = "symbolic link"
    else:
        found = _kind_of(os.fstat(fd).st_mode)
        if found == kind:
            return fd
        os.close(fd)
    raise ImproperlyConfigured(
        f"{path} is a {found}, not the {kind} that plumb's SQLite writer queue keeps "
        "beside the database; stop plumb, remove it, and start plumb again."
    )


def _kind_of(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "regular file"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    return "special file"


class WriterQueue:
    """The queue of one process for one database file."""

    def __init__(self, path: str) -> None:
        self.thread_lock = threading.Lock()
        self.lock_fd = _open_own(f"{path}-writers.lock", os.O_CREAT, "regular file")
        try:
            with contextlib.suppress(FileExistsError):
                os.mkfifo(f"{path}-writers.wake", 0o600)
            # Read-write, so that opening never blocks and the FIFO always has a writer.
            self.wake_fd = _open_own(f"{path}-writers.wake", 0, "FIFO")
        except BaseException:
            os.close(self.lock_fd)
            raise
        # poll, not select: select() cannot watch a descriptor numbered past
        # 1024, which a server process with many sockets open reaches.
        self._wake = select.poll()
        self._wake.register(self.wake_fd, select.POLLIN)

    def enter(self, timeout: float) -> tuple[bool, bool]:
        """Wait for this process's turn, then the file's; whether each was had in time.

        Whatever ends the wait for the file early (an exception from a signal
        handler, a failing system call) gives the process's turn back: kept,
        it would make every later writer of the process wait out its timeout.
        """
        deadline = time.monotonic() + timeout
        if not self.thread_lock.acquire(timeout=timeout):
            return False, False
        try:
            return True, self._wait_for_file(deadline)
        except BaseException:
            self.thread_lock.release()
            raise

    def _wait_for_file(self, deadline: float) -> bool:
        while True:
            try:
                fcntl.flock(self.lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
            # Only the holder of thread_lock polls, so one poll object serves the process.
            self._wake.poll(min(remaining, _NAP_SECONDS) * 1000)
            with contextlib.suppress(BlockingIOError):
                os.read(self.wake_fd, 65536)  # wake-ups nobody waited for, too

    def leave(self, held_thread: bool, held_file: bool) -> None:
        try:
            if held_file:
                fcntl.flock(self.lock_fd, fcntl.LOCK_UN)
                with contextlib.suppress(BlockingIOError):  # full: the waiters are awake anyway
                    os.write(self.wake_fd, b"\0")
        finally:
            if held_thread:
                self.thread_lock.release()

    def close(self) -> None:
        os.close(self.lock_fd)
        os.close(self.wake_fd)


_queues: dict[tuple[int, str], WriterQueue] = {}


def _queue_for(path: str) -> WriterQueue:
    # Per process: a descriptor inherited through fork() would share its
    # flock with the parent, and so would not keep the two apart.
    key = (os.getpid(), path)
    with _guard:
        queue = _queues.get(key)
        if queue is None:
            queue = _queues[key] = WriterQueue(path)
        return queue


class DatabaseCreation(creation.DatabaseCreation):
    def _destroy_test_db(self, test_database_name, verbosity):
        super()._destroy_test_db(test_database_name, verbosity)
        if not self.is_in_memory_db(test_database_name):
            path = str(test_database_name)
            with _guard:
                for key in [k for k in _queues if k[1] == path]:
                    _queues.pop(key).close()
            for suffix in ("-writers.lock", "-writers.wake"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path + suffix)


_execute = base.Database.Cursor.execute


@functools.lru_cache(maxsize=512)
def _qmark(query: str) -> str:
    return base.FORMAT_QMARK_REGEX.sub("?", query).replace("%%", "%")


# The first keyword, past blanks and comments (as sqlite3 finds it to decide
# whether a statement needs a transaction opened before it).
_FIRST_KEYWORD = re.compile(r"(?:\s|--[^\n]*(?:\n|$)|/\*.*?\*/)*(\w+)", re.DOTALL)
_WRITE_KEYWORDS = frozenset({"INSERT", "UPDATE", "DELETE", "REPLACE", "CREATE", "DROP", "ALTER"})
_DML_KEYWORD = re.compile(r"\b(?:INSERT|UPDATE|DELETE|REPLACE)\b", re.IGNORECASE)


@functools.lru_cache(maxsize=512)
def _writes(query: str) -> bool:
    """Whether the statement writes, and so must wait for its turn outside a transaction.

    ``WITH`` starts reads and writes alike; one that names a DML keyword
    anywhere counts as a write (at worst a read queues needlessly).
    """
    first = _FIRST_KEYWORD.match(query)
    keyword = first.group(1).upper() if first else ""
    if keyword == "WITH":
        return _DML_KEYWORD.search(query) is not None
    return keyword in _WRITE_KEYWORDS


class CursorWrapper(base.SQLiteCursorWrapper):
    """Queues writes outside a transaction; converts ``%s`` to ``?`` once per statement.

    A statement that writes while no transaction is open (Django's
    autocommit: the delivery claim, ``session_touch``, ``read_advance``) is a
    transaction of its own to SQLite and takes the write lock just the same,
    so it waits for its turn in the queue like an ``atomic()`` block. Inside
    a transaction the queue is already held; reads never queue.

    The conversion is a regular expression over the whole SQL text; for the
    long statements every request runs, it cost more than SQLite needed to
    run them.
    """

    # The Django connection whose queue this cursor's writes join; None for
    # an in-memory database, which has one connection and nobody to queue for.
    db: DatabaseWrapper | None = None

    def execute(self, query, params=None):
        if self.db is None or self.connection.in_transaction or not _writes(query):
            if type(params) is list or type(params) is tuple:
                # Django's execute for a sequence of parameters, one call shorter.
                return _execute(self, _qmark(query), params)
            return super().execute(query, params)
        return self.db._write_in_turn(super().execute, query, params)

    def executemany(self, query, param_list):
        if self.db is None or self.connection.in_transaction or not _writes(query):
            return super().executemany(query, param_list)
        return self.db._write_in_turn(super().executemany, query, param_list)

    def convert_query(self, query, *, param_names=None):
        if param_names is None:
            return _qmark(query)
        return super().convert_query(query, param_names=param_names)


class StatementCursor(utils.CursorWrapper):
    """Django's cursor wrapper, without the per-statement layers that do nothing here.

    Django runs each statement through its execute wrappers (a context dict
    even when there is none, and a partial per wrapper), then through a
    ``DatabaseErrorWrapper`` made for the statement; each ``fetchall``
    asked of it wraps the method anew. Here, with no execute wrapper
    installed, a statement checks what Django's ``_execute`` checks and runs;
    only an error goes through a ``DatabaseErrorWrapper``, which raises
    Django's exception from sqlite3's as Django's does. With a wrapper
    installed, or before the apps are ready (Django warns then), Django's own
    path runs. Logged queries (``DEBUG``, ``CaptureQueriesContext``) get
    Django's debug cursor instead (``make_debug_cursor``).
    ``tests/plumb_site/test_sqlite_cursor.py`` holds it to Django's, case by case.
    """

    def execute(self, sql, params=None):
        db = self.db
        if db.execute_wrappers or not apps.ready:
            return super().execute(sql, params)
        db.validate_no_broken_transaction()
        return self._guarded(self.cursor.execute, sql, params)

    def fetchone(self):
        return self._guarded(self.cursor.fetchone)

    def fetchmany(self, *args, **kwargs):
        return self._guarded(self.cursor.fetchmany, *args, **kwargs)

    def fetchall(self):
        return self._guarded(self.cursor.fetchall)

    def _guarded(self, call, *args, **kwargs):
        """``call``'s answer; an error in it raised as Django's, from sqlite3's."""
        try:
            return call(*args, **kwargs)
        except Exception:
            with self.db.wrap_database_errors:
                raise


class DatabaseWrapper(base.DatabaseWrapper):
    creation_class = DatabaseCreation
    ops_class = DatabaseOperations
    _queued: tuple[WriterQueue, bool, bool] | None = None

    def get_connection_params(self):
        """Django's, without sqlite3's conversion of values by declared column type.

        With ``PARSE_DECLTYPES`` sqlite3 looks up a converter for every column
        of every statement it runs and calls Django's parser of dates for
        every datetime it fetches; then the ORM's own converters
        (``DatabaseOperations.get_db_converters``) look at the value again.
        Those take the text SQLite stores as well (as they must for an
        expression, which has no declared type), so the conversion is done
        once: the query that authenticates every call (five datetimes, three
        booleans) took about 15 µs less without it. Raw SQL gets SQLite's
        values: text for a datetime, 0 or 1 for a boolean, as ``COALESCE``
        and every other expression always gave it.
        """
        params = super().get_connection_params()
        params["detect_types"] = 0
        return params

    def make_cursor(self, cursor):
        return StatementCursor(cursor, self)

    def create_cursor(self, name=None):
        cursor = self.connection.cursor(factory=CursorWrapper)
        if not self.is_in_memory_db():
            cursor.db = self
        return cursor

    def _start_transaction_under_autocommit(self) -> None:
        if self.is_in_memory_db():
            return super()._start_transaction_under_autocommit()
        self._enter_queue()
        try:
            super()._start_transaction_under_autocommit()
        except BaseException:
            self._leave_queue()
            raise

    def _enter_queue(self) -> None:
        """Wait for this connection's turn to write; ``_leave_queue`` ends it."""
        queue = _queue_for(str(self.settings_dict["NAME"]))
        started = time.perf_counter()
        self._queued = (queue, *queue.enter(float(self.settings_dict["OPTIONS"].get("timeout", 5))))
        try:
            # plumb_sqlite_writer_wait_seconds: how long writers queue for each other.
            metrics.SQLITE_WRITER_WAIT_SECONDS.observe(time.perf_counter() - started)
        except BaseException:
            self._leave_queue()
            raise

    def _write_in_turn(self, execute, query, params):
        """Run one statement that writes outside a transaction, in its turn.

        The turn ends with the statement. Rows of a ``RETURNING`` clause keep
        SQLite's lock until they are read, a moment later (Django reads them
        at once); a writer let in meanwhile meets SQLite's own wait.
        """
        self._enter_queue()
        try:
            return execute(query, params)
        finally:
            # With Django's autocommit off, sqlite3 opened a transaction before
            # the statement and keeps SQLite's lock until it ends: the queue is
            # left then, at the commit or the rollback.
            if not self.connection.in_transaction:
                self._leave_queue()

    def _leave_queue(self) -> None:
        if self._queued is not None:
            queue, held_thread, held_file = self._queued
            self._queued = None
            queue.leave(held_thread, held_file)

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
