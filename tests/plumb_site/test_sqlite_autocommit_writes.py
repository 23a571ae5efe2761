"""Writes outside a transaction queue too: an autocommit statement waits its turn behind
another thread's or process's transaction, reads never queue, and a transaction queues
once for all its writes.

These tests use their own SQLite file through plumb's backend, so they run whichever
database the rest of the suite uses.
"""

from __future__ import annotations

import fcntl
import threading
import time

import pytest
from django.db.utils import OperationalError

from plumb_site.sqlite import base as queue_backend
from tests.plumb_site.sqlite_queue import (
    TIMEOUT,
    _count,
    _held_elsewhere,
    _in_queue,
    _wait_until,
    _wrapper,
    _Writer,
    _writer_waits,
)

pytestmark = pytest.mark.usefixtures("own_database_allowed")


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
