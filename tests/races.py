"""Deterministic race tests, on SQLite and PostgreSQL alike.

A race test runs two services on two real database connections (two
threads). The first is held at a named pause point (``common.pause``) with
its transaction open; the second is started and the test waits until it is
either blocked on a lock the first holds or finished; then the first goes
on. So the interleaving that would break a guarantee happens on every run,
not once in a thousand, and a test proves the fix only if it fails without
it.

"Blocked" is read from the database where it can be: PostgreSQL's
``pg_stat_activity`` says a backend waits for a lock. SQLite's writers queue
in plumb's backend before they ask SQLite for its lock
(``plumb_site/sqlite/base.py``), so a thread whose stack is in the queue is
waiting for the writer that holds it.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from django.db import connection, connections

from common.pause import set_hook

TIMEOUT = 20  # seconds any one step may take before the test gives up


class Racer(threading.Thread):
    """Runs ``action`` on a connection of its own; keeps its result or its error."""

    def __init__(self, action: Callable[[], Any], name: str = "racer") -> None:
        super().__init__(name=name, daemon=True)
        self.action = action
        self.result: Any = None
        self.error: BaseException | None = None
        self.backend_pid: int | None = None
        self.connected = threading.Event()

    def run(self) -> None:
        try:
            connection.ensure_connection()
            if connection.vendor == "postgresql":
                self.backend_pid = connection.connection.info.backend_pid
            self.connected.set()
            self.result = self.action()
        except BaseException as exc:  # handed to the test through outcome()
            self.error = exc
        finally:
            self.connected.set()
            connections.close_all()

    def outcome(self) -> Any:
        """The action's result once it has finished; re-raises its error."""
        self.join(TIMEOUT)
        assert not self.is_alive(), f"{self.name} did not finish within {TIMEOUT} s"
        if self.error is not None:
            raise self.error
        return self.result


class Held:
    """A pause point that holds the first thread reaching it until ``release()``."""

    def __init__(self, point: str) -> None:
        self.point = point
        self.reached = threading.Event()
        self.released = threading.Event()

    def _hook(self) -> None:
        if self.reached.is_set():
            return  # only the first arrival is held; the others pass
        self.reached.set()
        assert self.released.wait(TIMEOUT), f"{self.point} was never released"

    def wait_reached(self) -> None:
        assert self.reached.wait(TIMEOUT), f"nothing reached {self.point}"

    def release(self) -> None:
        self.released.set()


@contextlib.contextmanager
def held_at(point: str) -> Iterator[Held]:
    held = Held(point)
    set_hook(point, held._hook)
    try:
        yield held
    finally:
        set_hook(point, None)
        held.release()


def _waits_in_writer_queue(racer: Racer) -> bool:
    from plumb_site.sqlite.base import WriterQueue

    frame = sys._current_frames().get(racer.ident)
    while frame is not None:
        if frame.f_code is WriterQueue.enter.__code__:
            return True
        frame = frame.f_back
    return False


def _waits_for_pg_lock(racer: Racer) -> bool:
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [racer.backend_pid]
        )
        row = cursor.fetchone()
    return row is not None and row[0] == "Lock"


def blocked_or_done(racer: Racer) -> str:
    """Wait until ``racer`` waits for a lock another connection holds, or has finished.

    Returns ``"blocked"`` or ``"done"``; which one is itself a finding (a
    service that should have waited for the held transaction and did not).
    """
    assert racer.connected.wait(TIMEOUT), f"{racer.name} never connected"
    waits = _waits_for_pg_lock if connection.vendor == "postgresql" else _waits_in_writer_queue
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        if not racer.is_alive():
            return "done"
        if waits(racer):
            return "blocked"
        time.sleep(0.002)
    raise AssertionError(f"{racer.name} neither blocked nor finished within {TIMEOUT} s")


def race(
    point: str, first: Callable[[], Any], second: Callable[[], Any]
) -> tuple[Racer, Racer, str]:
    """``first`` held at ``point``; ``second`` runs until blocked or done; then both finish.

    Returns both racers (finished) and what the second did while the first was held.
    """
    with held_at(point) as held:
        one = Racer(first, name=f"first ({point})")
        one.start()
        held.wait_reached()
        two = Racer(second, name="second")
        two.start()
        state = blocked_or_done(two)
        held.release()
        one.join(TIMEOUT)
        two.join(TIMEOUT)
    return one, two, state


@contextlib.contextmanager
def first_sleep_of(thread: threading.Thread) -> Iterator[threading.Event]:
    """An event set once ``thread``'s waiting call has looked, found nothing and gone to sleep.

    A call holds its waiting place (``wakeups.waiting_polls()``) before its
    first look: a commit then would be found by that look and answered, so a
    test that must see the call *asleep* before it commits waits for this.
    """
    asleep = threading.Event()

    def hook() -> None:
        if threading.current_thread() is thread:
            asleep.set()

    set_hook("poll.asleep", hook)
    try:
        yield asleep
    finally:
        set_hook("poll.asleep", None)
