"""How many requests of one server process run Django code at the same time.

Threads of one Python process share one interpreter lock. Running several
requests at once in a process buys no CPU; it costs hand-overs instead: each
SQL call releases the lock, another thread takes it, and a send waits for it
back while it holds SQLite's write lock, which keeps every other writer of
every process waiting too. So on SQLite each process admits one request at a
time (``PLUMB_ACTIVE_REQUESTS``, default 1) and server processes give the
parallelism. The other threads still read requests off their sockets and
write responses out, and a long-poll (``check_messages``, ``read_messages``
or ``wait_for_activity`` with ``wait``) steps aside while it waits, so
threads per process remain the capacity for idle pollers.

PostgreSQL does its work in its own processes and a request mostly waits on
the network and the disk there, so the gate is open by default (0: as many
requests as there are threads).

Under plumb's server (``plumb_site/asgi.py``) a request waits for its turn on
the event loop, holding no thread (``common/inturn.py``), and reaches a
thread when a seat is about to be free; this gate then admits it at once.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

from django.conf import settings
from django.db import connections

from common import inturn, metrics


class RequestGate:
    def __init__(self, width: int) -> None:
        self.width = width
        self._slots = threading.BoundedSemaphore(width) if width else None
        self._holders = threading.local()

    def holds(self) -> bool:
        return getattr(self._holders, "held", False)

    @contextlib.contextmanager
    def admitted(self) -> Iterator[None]:
        """Run the block as one of the process's active requests.

        The wait for a turn is observed (``plumb_gate_wait_seconds``), with
        the wait in the front's queue before it (``common/inturn.py``): a
        growing wait says the process has more work than its turns.
        """
        if self._slots is None or self.holds():
            yield
            return
        started = time.perf_counter()
        self._slots.acquire()
        metrics.GATE_WAIT_SECONDS.observe(time.perf_counter() - started + inturn.waited())
        self._holders.held = True
        try:
            yield
        finally:
            self._release()

    @contextlib.contextmanager
    def stepped_aside(self) -> Iterator[None]:
        """Let another request in while this one only waits.

        A thread inside a transaction keeps its place: what it holds (SQLite's
        writer queue, row locks) could be what the next request needs. Under
        the server, the calls queued behind this one on the event loop get
        its seat too (``inturn.aside``).
        """
        if not self.holds() or _in_transaction():
            yield
            return
        self._release()
        try:
            with inturn.aside():
                yield
        finally:
            self._slots.acquire()
            self._holders.held = True

    def _release(self) -> None:
        self._holders.held = False
        self._slots.release()


def _in_transaction() -> bool:
    return any(conn.in_atomic_block for conn in connections.all(initialized_only=True))


_gate: RequestGate | None = None
_gate_guard = threading.Lock()


def gate() -> RequestGate:
    """The process's gate, sized from settings on first use."""
    global _gate
    if _gate is None:
        with _gate_guard:
            if _gate is None:
                _gate = RequestGate(settings.PLUMB_ACTIVE_REQUESTS)
    return _gate
