"""plumb's SQLite backend (plumb_site.sqlite): writers of every thread and process queue
one at a time; the turn is given back however a transaction ends or a wait is cut short;
files planted in place of the queue's are refused, and a stuck holder costs a timeout.

These tests use their own SQLite file through plumb's backend, so they run whichever
database the rest of the suite uses.
"""

from __future__ import annotations

import contextlib
import fcntl
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
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db.utils import OperationalError

from plumb_site.sqlite import base as queue_backend
from tests.plumb_site.sqlite_queue import (
    TIMEOUT,
    _count,
    _create,
    _held_elsewhere,
    _in_queue,
    _wait_until,
    _wrapper,
    _write_in_transaction,
    _Writer,
    _writer_waits,
)

pytestmark = pytest.mark.usefixtures("own_database_allowed")

INCREMENTS = 40


# The spawned processes import this module to find _increment and _hold_queue_file,
# before any Django app is loaded: nothing imported here may need one.
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
