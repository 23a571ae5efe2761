"""plumb's SQLite backend (plumb_site.sqlite): queued writers, statements converted once.

These tests use their own SQLite file through plumb's backend, so they run
whichever database the rest of the suite uses.
"""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from django.db.backends.sqlite3.base import SQLiteCursorWrapper
from django.db.utils import ConnectionHandler, OperationalError
from prometheus_client import REGISTRY

from plumb_site.sqlite import base as queue_backend

INCREMENTS = 40


def _wrapper(path: str, timeout: float = 10):
    handler = ConnectionHandler(
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
    return handler["default"]


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


@pytest.fixture
def database(tmp_path: Path) -> str:
    path = str(tmp_path / "queue.sqlite3")
    wrapper = _wrapper(path)
    with wrapper.cursor() as cursor:
        cursor.execute("CREATE TABLE counter (n INTEGER NOT NULL)")
        cursor.execute("INSERT INTO counter (n) VALUES (0)")
    wrapper.close()
    return path


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
