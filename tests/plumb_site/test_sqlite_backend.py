"""plumb's SQLite backend (plumb_site.sqlite): queued writers, statements converted once.

These tests use their own SQLite file through plumb's backend, so they run
whichever database the rest of the suite uses.
"""

from __future__ import annotations

import contextlib
import fcntl
import inspect
import multiprocessing
import os
import re
import resource
import signal
import sqlite3
import sys
import termios
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import django
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.sqlite3 import base as django_sqlite
from django.db.backends.sqlite3 import creation as django_creation
from django.db.backends.sqlite3.base import SQLiteCursorWrapper
from django.db.utils import ConnectionHandler, OperationalError
from prometheus_client import REGISTRY

from plumb_site.sqlite import base as queue_backend

INCREMENTS = 40
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


def _increment(path: str, times: int) -> None:
    """Read, then write a greater value: loses updates unless writers are kept apart."""
    wrapper = _wrapper(path)
    for _ in range(times):
        wrapper.ensure_connection()
        wrapper._start_transaction_under_autocommit()
        with wrapper.cursor() as cursor:
            cursor.execute("SELECT n FROM counter")
            (n,) = cursor.fetchone()
            cursor.execute("UPDATE counter SET n = %s", [n + 1])
        wrapper.commit()
    wrapper.close()


@pytest.fixture(autouse=True)
def own_database_allowed(django_db_blocker):
    # pytest-django guards the project's database; these tests use a file of their own.
    with django_db_blocker.unblock():
        yield


def _create(path: str) -> str:
    wrapper = _wrapper(path)
    with wrapper.cursor() as cursor:
        cursor.execute("CREATE TABLE counter (n INTEGER NOT NULL)")
        cursor.execute("INSERT INTO counter (n) VALUES (0)")
    wrapper.close()
    return path


@pytest.fixture
def database(tmp_path: Path) -> Iterator[str]:
    path = _create(str(tmp_path / "queue.sqlite3"))
    yield path
    queue = queue_backend._queues.pop((os.getpid(), path), None)
    if queue is not None:
        queue.close()


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


def test_threads_and_processes_write_one_at_a_time_and_lose_nothing(database):
    spawn = multiprocessing.get_context("spawn")
    processes = [spawn.Process(target=_increment, args=(database, INCREMENTS)) for _ in range(3)]
    errors: list[BaseException] = []

    def thread_body():
        try:
            _increment(database, INCREMENTS)
        except BaseException as exc:  # reported below, with the count
            errors.append(exc)

    threads = [threading.Thread(target=thread_body) for _ in range(4)]
    for worker in [*processes, *threads]:
        worker.start()
    for thread in threads:
        thread.join(timeout=120)
    for process in processes:
        process.join(timeout=120)

    assert errors == []
    assert [p.exitcode for p in processes] == [0, 0, 0]
    assert _count(database) == INCREMENTS * (len(processes) + len(threads))


@pytest.mark.parametrize("end", ["commit", "rollback", "close"])
def test_the_queue_is_left_however_the_transaction_ends(database, end):
    wrapper = _wrapper(database)
    queue = queue_backend._queue_for(database)
    thread_lock, fd = queue.thread_lock, queue.lock_fd

    wrapper.ensure_connection()
    wrapper._start_transaction_under_autocommit()
    assert thread_lock.locked()
    getattr(wrapper, end)()

    assert not thread_lock.locked()
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if still held
    fcntl.flock(fd, fcntl.LOCK_UN)
    wrapper.close()


def _writer_waits() -> tuple[float, float]:
    """(count, sum) of plumb_sqlite_writer_wait_seconds in this process."""
    count = REGISTRY.get_sample_value("plumb_sqlite_writer_wait_seconds_count") or 0.0
    return count, REGISTRY.get_sample_value("plumb_sqlite_writer_wait_seconds_sum") or 0.0


def test_the_wait_in_the_queue_is_observed_once_per_transaction(database):
    holding = threading.Event()

    def hold() -> None:
        holder = _wrapper(database)
        holder.ensure_connection()
        holder._start_transaction_under_autocommit()
        holding.set()
        time.sleep(0.3)
        holder.commit()
        holder.close()

    waiter = _wrapper(database)
    waiter.ensure_connection()
    count_before, sum_before = _writer_waits()
    holder_thread = threading.Thread(target=hold)
    holder_thread.start()
    assert holding.wait(10)

    waiter._start_transaction_under_autocommit()  # queues until the holder commits
    waiter.commit()
    holder_thread.join(10)

    count_after, sum_after = _writer_waits()
    assert count_after - count_before == 2  # the holder's transaction and the waiter's
    assert sum_after - sum_before >= 0.25
    waiter.close()


def test_the_queue_is_left_when_begin_fails(database):
    wrapper = _wrapper(database)
    thread_lock = queue_backend._queue_for(database).thread_lock
    wrapper.ensure_connection()
    with wrapper.cursor() as cursor:
        cursor.execute("BEGIN")  # outside the queue: the next BEGIN fails

    with pytest.raises(OperationalError):
        wrapper._start_transaction_under_autocommit()

    assert not thread_lock.locked()
    wrapper.close()


def test_wake_ups_nobody_waited_for_do_not_let_two_writers_in(database):
    # Every release writes a byte into the FIFO, waiter or not; left-over
    # bytes may wake a waiter early, which must then look at the lock again.
    queue = queue_backend._queue_for(database)
    os.write(queue.wake_fd, b"\0" * 5000)

    test_threads_and_processes_write_one_at_a_time_and_lose_nothing(database)


def _hold_queue_file(path: str, held, release) -> None:
    fd = os.open(f"{path}-writers.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    held.set()
    release.wait(60)


def test_a_queue_held_elsewhere_past_the_timeout_leaves_the_decision_to_sqlite(database):
    # A stuck or foreign holder of the queue file must not block writers for
    # ever: after SQLite's own busy timeout they go ahead, and SQLite, which
    # nobody has locked, lets them write.
    spawn = multiprocessing.get_context("spawn")
    held, release = spawn.Event(), spawn.Event()
    holder = spawn.Process(target=_hold_queue_file, args=(database, held, release))
    holder.start()
    try:
        assert held.wait(60)
        wrapper = _wrapper(database, timeout=0.3)
        _write_in_transaction(wrapper, "UPDATE counter SET n = 7")
        wrapper.close()
    finally:
        release.set()
        holder.join(timeout=60)

    assert _count(database) == 7


def test_a_forked_process_queues_on_its_own_descriptor(database):
    # flock belongs to the open file description: one inherited through fork
    # would be shared with the parent and keep nothing apart.
    parent_fd = queue_backend._queue_for(database).lock_fd
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child reports whether it got a fresh descriptor, then leaves
        child_fd = queue_backend._queue_for(database).lock_fd
        os.write(write_end, b"fresh" if child_fd != parent_fd else b"shared")
        os._exit(0)
    os.close(write_end)
    answer = os.read(read_end, 16)
    os.waitpid(pid, 0)
    os.close(read_end)

    assert answer == b"fresh"


@pytest.mark.parametrize(
    "query",
    [
        "SELECT 1",
        'SELECT "a" FROM "t" WHERE "b" = %s AND "c" IN (%s, %s)',
        "SELECT '100%%' || %s, '%%s' FROM t WHERE x LIKE %s ESCAPE '\\'",
    ],
)
def test_statements_convert_as_djangos_do_and_once(query):
    raw = sqlite3.connect(":memory:")
    ours = raw.cursor(factory=queue_backend.CursorWrapper)
    theirs = raw.cursor(factory=SQLiteCursorWrapper)
    queue_backend._qmark.cache_clear()

    assert ours.convert_query(query) == theirs.convert_query(query)
    assert ours.convert_query(query) == theirs.convert_query(query)
    assert queue_backend._qmark.cache_info().hits == 1
    named = "SELECT %(a)s, %(b)s"
    assert ours.convert_query(named, param_names=["a", "b"]) == "SELECT :a, :b"
    raw.close()


def test_plumb_queries_go_through_the_cached_conversion(database):
    wrapper = _wrapper(database)
    queue_backend._qmark.cache_clear()
    for _ in range(3):
        with wrapper.cursor() as cursor:
            cursor.execute("SELECT n FROM counter WHERE n >= %s", [0])
            assert cursor.fetchone() == (0,)
    wrapper.close()

    assert queue_backend._qmark.cache_info().hits == 2


class _Interrupted(Exception):
    pass


def _interrupt(signum, frame):
    raise _Interrupted


def test_a_wait_cut_short_by_an_exception_gives_the_turn_back(database):
    # A signal handler's exception (Ctrl-C, a server shutting down) or a failing
    # system call can end the wait anywhere. If the process's turn went with
    # it, every later writer of the process would wait the whole timeout for
    # a turn nobody holds.
    assert threading.current_thread() is threading.main_thread()  # signals land here
    queue = queue_backend._queue_for(database)
    waiter = _wrapper(database, timeout=TIMEOUT)
    waiter.ensure_connection()
    me = threading.get_ident()

    def interrupt_while_waiting_for_the_file() -> None:
        _wait_until(lambda: queue.thread_lock.locked() and _in_queue(me), "the waiter never queued")
        signal.pthread_kill(me, signal.SIGUSR1)

    previous = signal.signal(signal.SIGUSR1, _interrupt)
    interrupter = _Writer(interrupt_while_waiting_for_the_file)
    try:
        with _held_elsewhere(database):
            interrupter.start()
            with pytest.raises(_Interrupted):
                waiter._start_transaction_under_autocommit()
        interrupter.finish()
    finally:
        signal.signal(signal.SIGUSR1, previous)

    assert not queue.thread_lock.locked()
    assert waiter._queued is None
    # The next write of the process gets both turns at once.
    waiter._start_transaction_under_autocommit()
    assert waiter._queued == (queue, True, True)
    waiter.rollback()
    waiter.close()


def _unread_wakeups(queue: queue_backend.WriterQueue) -> int:
    return int.from_bytes(fcntl.ioctl(queue.wake_fd, termios.FIONREAD, bytes(4)), sys.byteorder)


@contextlib.contextmanager
def _low_descriptors_taken(above: int) -> Iterator[None]:
    """Descriptors up to ``above`` in use, as in a server with many sockets open."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < above + 100:
        resource.setrlimit(resource.RLIMIT_NOFILE, (above + 100, hard))
    taken: list[int] = []
    try:
        while not taken or taken[-1] < above:
            taken.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
        yield
    finally:
        for fd in taken:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_writer_waits_for_the_file_on_a_descriptor_above_1024(tmp_path):
    # select() cannot watch a descriptor numbered past FD_SETSIZE (1024).
    with _low_descriptors_taken(above=1100):
        path = _create(str(tmp_path / "high.sqlite3"))
        queue = queue_backend._queue_for(path)
    assert queue.wake_fd > 1024

    writer = _Writer(lambda: _write_in_transaction(_wrapper(path), "UPDATE counter SET n = 3"))
    with _held_elsewhere(path):
        # A wake-up while the file is still held: the writer waits for it on
        # the descriptor, reads it, finds the file locked and waits again.
        os.write(queue.wake_fd, b"\0")
        writer.start()
        _wait_until(
            lambda: _unread_wakeups(queue) == 0 or not writer.is_alive(),
            "the writer never read the wake-up",
        )
    writer.finish()

    assert _count(path) == 3
    assert not queue.thread_lock.locked()
    queue_backend._queues.pop((os.getpid(), path)).close()


def _plant(kind: str, at: Path, elsewhere: Path) -> None:
    if kind == "symbolic link":
        at.symlink_to(elsewhere)
    elif kind == "FIFO":
        os.mkfifo(at)
    else:
        at.write_bytes(b"")


@pytest.mark.parametrize(
    ("suffix", "kind"),
    [
        ("-writers.lock", "symbolic link"),
        ("-writers.lock", "FIFO"),
        ("-writers.wake", "symbolic link"),
        ("-writers.wake", "regular file"),
    ],
)
def test_a_queue_file_planted_in_place_of_plumbs_is_refused(tmp_path, suffix, kind):
    # Followed, a link would have plumb create or lock a file elsewhere (here
    # the link's target must not appear); a file of another kind is no queue.
    path = _create(str(tmp_path / "queue.sqlite3"))
    stale = queue_backend._queues.pop((os.getpid(), path), None)
    if stale is not None:
        stale.close()
    for leftover in ("-writers.lock", "-writers.wake"):
        Path(path + leftover).unlink(missing_ok=True)
    elsewhere = tmp_path / "elsewhere"
    if suffix == "-writers.wake":
        os.mkfifo(elsewhere)  # a FIFO, but not the one beside the database
    _plant(kind, Path(path + suffix), elsewhere)

    wrapper = _wrapper(path)
    with pytest.raises(ImproperlyConfigured, match=f"{re.escape(path + suffix)} is a {kind}, "):
        _write_in_transaction(wrapper, "UPDATE counter SET n = 1")
    wrapper.close()

    assert (os.getpid(), path) not in queue_backend._queues
    assert suffix == "-writers.wake" or not elsewhere.exists()
    assert _count(path) == 0


def _autocommit(path: str, sql: str, params: list | None = None, *, many: bool = False) -> None:
    """One statement outside any transaction, as ``QuerySet.update()`` runs it."""
    wrapper = _wrapper(path)
    assert wrapper.get_autocommit()
    with wrapper.cursor() as cursor:
        if many:
            cursor.executemany(sql, params)
        else:
            cursor.execute(sql, params)
    assert not wrapper.in_atomic_block
    wrapper.close()


def _queued_or_done(writer: _Writer, queue: queue_backend.WriterQueue) -> str:
    """Wait until ``writer`` waits in the writer queue, or has finished."""
    _wait_until(lambda: writer.ident is not None, "the writer never started")
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        if not writer.is_alive():
            return "done"
        if _in_queue(writer.ident):
            return "queued"
        time.sleep(0.002)
    raise AssertionError(f"the writer neither queued nor finished within {TIMEOUT} s")


def test_an_autocommit_write_queues_behind_another_threads_transaction(database):
    # Without the queue the UPDATE would sleep in SQLite's busy handler
    # (1, 2, 5 ... 100 ms naps) while the transaction holds the lock.
    queue = queue_backend._queue_for(database)
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        holder = _wrapper(database)
        holder.ensure_connection()
        holder._start_transaction_under_autocommit()
        with holder.cursor() as cursor:
            cursor.execute("UPDATE counter SET n = n + 1")
        holding.set()
        assert release.wait(TIMEOUT)
        holder.commit()
        holder.close()

    holder = _Writer(hold)
    holder.start()
    assert holding.wait(TIMEOUT)
    writer = _Writer(lambda: _autocommit(database, "UPDATE counter SET n = n + 10"))
    writer.start()
    state = _queued_or_done(writer, queue)
    release.set()
    holder.finish()
    writer.finish()

    assert state == "queued"
    assert _count(database) == 11
    assert not queue.thread_lock.locked()


@pytest.mark.parametrize(
    ("sql", "params", "many", "count"),
    [
        ("UPDATE counter SET n = 5", None, False, 5),
        ("DELETE FROM counter", None, False, None),
        ("INSERT INTO counter (n) VALUES (%s)", [[1], [2]], True, 0),
    ],
)
def test_an_autocommit_write_queues_behind_another_process(database, sql, params, many, count):
    # The queue file held elsewhere and SQLite free: without the queue the
    # statement would go straight in, past the writer whose turn it is.
    queue = queue_backend._queue_for(database)
    writer = _Writer(lambda: _autocommit(database, sql, params, many=many))
    with _held_elsewhere(database):
        writer.start()
        state = _queued_or_done(writer, queue)
        assert state == "queued"
        assert queue.thread_lock.locked()  # its turn in the process, waiting for the file's
    writer.finish()

    assert _count(database) == count if count is not None else _rows(database) == 0
    assert not queue.thread_lock.locked()
    fcntl.flock(queue.lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if still held
    fcntl.flock(queue.lock_fd, fcntl.LOCK_UN)


def _rows(path: str) -> int:
    wrapper = _wrapper(path)
    with wrapper.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM counter")
        (rows,) = cursor.fetchone()
    wrapper.close()
    return rows


def test_reads_outside_a_transaction_do_not_queue(database):
    # WAL serves readers beside the writer; a read that queued would wait here
    # for as long as the queue file is held.
    reader = _wrapper(database, timeout=TIMEOUT)
    count_before, _ = _writer_waits()
    with _held_elsewhere(database), reader.cursor() as cursor:
        cursor.execute("SELECT n FROM counter WHERE n >= %s", [0])
        assert cursor.fetchone() == (0,)
        cursor.execute("WITH c AS (SELECT n FROM counter) SELECT COUNT(*) FROM c")
        assert cursor.fetchone() == (1,)
        cursor.execute("PRAGMA foreign_keys")
        cursor.fetchone()

    assert _writer_waits()[0] == count_before
    reader.close()


def test_the_writes_of_a_transaction_queue_once_for_the_whole_transaction(database):
    wrapper = _wrapper(database, timeout=TIMEOUT)
    count_before, _ = _writer_waits()
    wrapper.ensure_connection()
    wrapper._start_transaction_under_autocommit()
    with wrapper.cursor() as cursor:
        cursor.execute("UPDATE counter SET n = n + 1")
        cursor.executemany("INSERT INTO counter (n) VALUES (%s)", [[7], [8]])
        cursor.execute("DELETE FROM counter WHERE n = %s", [8])
    wrapper.commit()

    assert _writer_waits()[0] == count_before + 1
    assert _rows(database) == 2
    wrapper.close()


def test_an_autocommit_write_that_fails_leaves_the_queue(database):
    queue = queue_backend._queue_for(database)
    wrapper = _wrapper(database)
    with pytest.raises(OperationalError), wrapper.cursor() as cursor:
        cursor.execute("UPDATE no_such_table SET n = 1")

    assert wrapper._queued is None
    assert not queue.thread_lock.locked()
    _autocommit(database, "UPDATE counter SET n = 2")  # the next write goes in
    assert _count(database) == 2
    wrapper.close()


def test_without_autocommit_the_queue_is_held_from_the_first_write_to_the_commit(database):
    # With Django's autocommit off, sqlite3 opens a transaction before the
    # first write and keeps it, and SQLite's lock with it, until the commit.
    queue = queue_backend._queue_for(database)
    wrapper = _wrapper(database)
    wrapper.set_autocommit(False)
    with wrapper.cursor() as cursor:
        cursor.execute("SELECT n FROM counter")
        assert not queue.thread_lock.locked()
        cursor.execute("UPDATE counter SET n = 4")
        assert queue.thread_lock.locked()
        cursor.execute("UPDATE counter SET n = n + 1")
    wrapper.commit()

    assert not queue.thread_lock.locked()
    wrapper.set_autocommit(True)
    wrapper.close()
    assert _count(database) == 5


@pytest.mark.parametrize(
    ("sql", "writes"),
    [
        ("SELECT n FROM counter", False),
        ('SELECT "updated_at", "deleted" FROM t', False),
        ("WITH c AS (SELECT 1) SELECT * FROM c", False),
        ("PRAGMA foreign_keys", False),
        ("EXPLAIN QUERY PLAN SELECT 1", False),
        ("BEGIN IMMEDIATE", False),
        ("SAVEPOINT s1", False),
        ("RELEASE SAVEPOINT s1", False),
        ('UPDATE "t" SET "a" = %s', True),
        ("  insert into t values (1)", True),
        ("DELETE FROM t", True),
        ("REPLACE INTO t VALUES (1)", True),
        ("/* why */ UPDATE t SET a = 1", True),
        ("-- why\nDELETE FROM t", True),
        ("WITH c AS (SELECT 1) UPDATE t SET a = 1", True),
        ("CREATE TABLE t (a)", True),
        ("DROP TABLE t", True),
        ("ALTER TABLE t ADD b", True),
    ],
)
def test_statements_that_write_are_told_from_reads(sql, writes):
    assert queue_backend._writes(sql) is writes


def test_past_the_timeout_sqlite_waits_the_timeout_again_before_refusing(database):
    # What the module docstring promises: a stuck holder of both the queue
    # file and SQLite's lock costs a writer one timeout in the queue, then
    # one more in SQLite's busy handler, then "database is locked".
    timeout = 0.3
    queue = queue_backend._queue_for(database)
    stuck = sqlite3.connect(database, isolation_level=None)
    stuck.execute("BEGIN IMMEDIATE")
    wrapper = _wrapper(database, timeout=timeout)
    wrapper.ensure_connection()
    try:
        with _held_elsewhere(database):
            started = time.monotonic()
            with pytest.raises(OperationalError, match="locked"):
                wrapper._start_transaction_under_autocommit()
        waited = time.monotonic() - started
    finally:
        stuck.rollback()
        stuck.close()

    assert waited >= 2 * timeout
    assert wrapper._queued is None
    assert not queue.thread_lock.locked()
    wrapper.close()


# --- the private Django API the queue stands on ------------------------------------------
# plumb_site/sqlite/base.py overrides hooks that Django does not document. A
# Django upgrade that renames them, changes their arguments or stops calling
# them would let writers past the queue (or leave it held) without an error:
# these tests say so by name instead.


def _django_changed(what: str, recheck: str) -> str:
    return (
        f"Django {django.get_version()}: {what}. plumb_site/sqlite/base.py overrides this "
        f"private hook to queue SQLite writers; re-check {recheck}, then update it and this test."
    )


_HOOKS = [
    (
        django_sqlite.DatabaseWrapper,
        queue_backend.DatabaseWrapper,
        "_start_transaction_under_autocommit",
        "(self)",
        "that atomic() still begins through it (BaseDatabaseWrapper.set_autocommit)",
    ),
    (
        BaseDatabaseWrapper,
        queue_backend.DatabaseWrapper,
        "_commit",
        "(self)",
        "that commit() and atomic()'s exit still end the transaction through it",
    ),
    (
        BaseDatabaseWrapper,
        queue_backend.DatabaseWrapper,
        "_rollback",
        "(self)",
        "that rollback() and atomic()'s exit on an error still end the transaction through it",
    ),
    (
        BaseDatabaseWrapper,
        queue_backend.DatabaseWrapper,
        "_close",
        "(self)",
        "that close() still closes the connection through it",
    ),
    (
        django_sqlite.DatabaseWrapper,
        queue_backend.DatabaseWrapper,
        "create_cursor",
        "(self, name=None)",
        "that cursor() still makes its cursors through it",
    ),
    (
        SQLiteCursorWrapper,
        queue_backend.CursorWrapper,
        "execute",
        "(self, query, params=None)",
        "that Django's CursorWrapper still runs every statement through it",
    ),
    (
        SQLiteCursorWrapper,
        queue_backend.CursorWrapper,
        "executemany",
        "(self, query, param_list)",
        "that Django's CursorWrapper still runs executemany() through it",
    ),
    (
        SQLiteCursorWrapper,
        queue_backend.CursorWrapper,
        "convert_query",
        "(self, query, *, param_names=None)",
        "how execute() converts format and pyformat parameters",
    ),
    (
        django_creation.DatabaseCreation,
        queue_backend.DatabaseCreation,
        "_destroy_test_db",
        "(self, test_database_name, verbosity)",
        "that destroy_test_db() still deletes the file through it",
    ),
]


def _parameters(function) -> str:
    return str(inspect.signature(function).replace(return_annotation=inspect.Signature.empty))


@pytest.mark.parametrize(
    ("django_class", "plumb_class", "name", "signature", "recheck"),
    _HOOKS,
    ids=[f"{hook[0].__name__}.{hook[2]}" for hook in _HOOKS],
)
def test_django_still_has_the_hooks_the_queue_overrides(
    django_class, plumb_class, name, signature, recheck
):
    hook = getattr(django_class, name, None)
    assert hook is not None, _django_changed(f"{django_class.__qualname__}.{name} is gone", recheck)
    assert _parameters(hook) == signature, _django_changed(
        f"{django_class.__qualname__}.{name} now takes {_parameters(hook)}, not {signature}",
        recheck,
    )
    assert issubclass(plumb_class, django_class)
    assert _parameters(getattr(plumb_class, name)) == signature  # plumb's override matches


def test_django_still_has_the_pattern_the_cached_conversion_uses():
    assert hasattr(django_sqlite, "FORMAT_QMARK_REGEX"), _django_changed(
        "django.db.backends.sqlite3.base.FORMAT_QMARK_REGEX is gone",
        "SQLiteCursorWrapper.convert_query, which CursorWrapper.convert_query caches",
    )


@pytest.fixture
def alias(database) -> Iterator[str]:
    """The test's database as a connection of Django's own, for atomic() and the ORM."""
    name = "sqlite_queue_test"
    connections.settings[name] = _handler(database).settings["default"]
    try:
        yield name
    finally:
        connections[name].close()
        del connections[name]
        del connections.settings[name]


def _spy(monkeypatch, connection, names: list[str]) -> list[str]:
    calls: list[str] = []
    for name in names:
        original = getattr(connection, name)

        def spy(*args, _name=name, _original=original, **kwargs):
            calls.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(connection, name, spy)
    return calls


class _Boom(Exception):
    pass


def test_atomic_takes_and_gives_back_the_turn_through_the_overridden_hooks(
    alias, database, monkeypatch
):
    connection = connections[alias]
    queue = queue_backend._queue_for(database)
    calls = _spy(
        monkeypatch,
        connection,
        ["_start_transaction_under_autocommit", "_commit", "_rollback", "_close"],
    )

    with transaction.atomic(using=alias):
        assert calls == ["_start_transaction_under_autocommit"], _django_changed(
            f"atomic() began its transaction with {calls}",
            "BaseDatabaseWrapper.set_autocommit and Atomic.__enter__",
        )
        assert queue.thread_lock.locked()
        with transaction.atomic(using=alias), connection.cursor() as cursor:  # a savepoint
            cursor.execute("UPDATE counter SET n = n + 1")
    assert calls[1:] == ["_commit"], _django_changed(
        f"atomic()'s exit called {calls[1:]}", "Atomic.__exit__ and BaseDatabaseWrapper.commit"
    )
    assert not queue.thread_lock.locked()

    with pytest.raises(_Boom), transaction.atomic(using=alias):
        raise _Boom
    assert calls[2:] == ["_start_transaction_under_autocommit", "_rollback"], _django_changed(
        f"atomic() around an error called {calls[2:]}",
        "Atomic.__exit__ and BaseDatabaseWrapper.rollback",
    )
    assert not queue.thread_lock.locked()

    connection.close()
    assert calls[4:] == ["_close"], _django_changed(
        f"close() called {calls[4:]}", "BaseDatabaseWrapper.close and the SQLite backend's close"
    )
    assert _count(database) == 1


def test_an_orm_update_outside_atomic_runs_in_its_turn_on_plumbs_cursor(alias, monkeypatch):
    # QuerySet.update() and save() in autocommit open no transaction: the
    # statement reaches plumb's cursor with sqlite3 in autocommit, which is
    # where the queue catches it.
    # Imported here: the processes these tests spawn import this module without app loading.
    from django.contrib.contenttypes.models import ContentType

    connection = connections[alias]
    with connection.schema_editor() as editor:
        editor.create_model(ContentType)
    with connection.cursor() as cursor:
        assert isinstance(cursor.cursor, queue_backend.CursorWrapper), _django_changed(
            f"cursor() made a {type(cursor.cursor).__qualname__}",
            "BaseDatabaseWrapper._cursor and create_cursor",
        )
    assert connection.connection.isolation_level is None, _django_changed(
        "autocommit no longer leaves sqlite3's isolation_level at None",
        "DatabaseWrapper._set_autocommit: CursorWrapper.execute reads sqlite3's in_transaction",
    )
    written: list[str] = []
    original = connection._write_in_turn

    def spy(execute, query, params):
        written.append(query.split()[0])
        return original(execute, query, params)

    monkeypatch.setattr(connection, "_write_in_turn", spy)

    kind = ContentType.objects.using(alias).create(app_label="plumb", model="queue")
    ContentType.objects.using(alias).filter(pk=kind.pk).update(model="queued")
    assert ContentType.objects.using(alias).get(pk=kind.pk).model == "queued"

    assert written == ["INSERT", "UPDATE"], _django_changed(
        f"the ORM's writes outside atomic() reached the queue as {written}",
        "QuerySet.update(), Model.save() and CursorWrapper.execute",
    )


def test_destroying_a_test_database_takes_its_queue_files_along(database):
    wrapper = _wrapper(database)
    _write_in_transaction(wrapper, "UPDATE counter SET n = 1")
    assert Path(database + "-writers.wake").exists()

    wrapper.creation.destroy_test_db(verbosity=0)

    assert not Path(database).exists()
    for suffix in ("-writers.lock", "-writers.wake"):
        assert not Path(database + suffix).exists(), _django_changed(
            f"destroy_test_db() left {suffix}",
            "BaseDatabaseCreation.destroy_test_db and DatabaseCreation._destroy_test_db",
        )
    assert (os.getpid(), database) not in queue_backend._queues
