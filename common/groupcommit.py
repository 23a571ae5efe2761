"""Group commit: small writes of many requests, committed together before any is answered.

One message in a room where 1,000 members wait in ``read_messages`` wakes
1,000 reads, and each moves its member's read position: 1,000 one-row
UPDATEs. On SQLite every write is a turn of the writer queue (one writer at
a time, across the processes, ``plumb_site/sqlite/base.py``) taken while the
request holds its process's only gate seat (``common/gate.py``), so the
reads answered one write after another. Here those writes wait for the
server's front instead, and the front commits whatever has gathered in one
transaction:

* A request may **defer** a write (``defer``) when it runs under plumb's
  front (``plumb_site/asgi.py``), which *collects* them (``collecting``).
  Elsewhere (the test client, a plain WSGI server) nothing collects and the
  caller writes at once, as before.
* The front holds the request's answer until its writes are committed
  (``GroupCommit.commit``): **no answer goes out before its write is
  durable**, so a client that reads again, on any process, starts from the
  position its answer reported. If the commit fails, the answer is replaced
  by an error (``503``), never sent without its write.
* One commit runs at a time per process, in a thread of its own, and the
  writes deferred while it runs form the next one. Before it starts, a
  commit **gathers**: while woken requests that may defer writes still run
  in this process (``GroupCommit``'s ``gathering``), it waits for them, up
  to ``GATHER_SECONDS``. Without that, a woken read (a few milliseconds)
  finished about as often as a commit did: in ``make bench``'s broadcast
  phase 1,000 woken reads made about 500 transactions, each a turn of the
  writer queue and some of the interpreter its reads need; gathered, about
  140. A write with no woken request beside it (the usual case) commits at
  once. Its own thread, not one of the pool's: behind
  the hundreds of woken reads queued for the pool, the first commit would
  wait for the last read, and every answer with it. It does not take the
  request gate either (it would queue behind them there too); it runs two
  or three statements, mostly in the database, beside the request that holds
  the gate.

A deferred write must be one whose effect the request's own answer already
accounts for, that another request may apply in any order with its
neighbours, and that is idempotent: a forward-only conditional UPDATE is the
model (``rooms.services.reading.read_positions_advance``). Each write is a
pair ``(apply, item)``; a commit calls each ``apply`` once with the list of
its items.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.db import close_old_connections, transaction

from common.pause import pause_point

Apply = Callable[[list[Any]], None]
Write = tuple[Apply, Any]

# Seconds a commit waits, at most, for the woken requests still running beside it
# (each answer waits for its commit: this bounds what gathering adds to it).
GATHER_SECONDS = 0.02
GATHER_STEP = 0.002  # seconds between two looks at whether they are done

_collecting = threading.local()


@contextlib.contextmanager
def collecting() -> Iterator[list[Write]]:
    """Collect the writes the request in this thread defers (the front's side)."""
    writes: list[Write] = []
    _collecting.writes = writes
    try:
        yield writes
    finally:
        _collecting.writes = None


def defer(apply: Apply, item: Any) -> bool:
    """Hand ``apply([item, ...])`` to the front; False where nothing collects (write now)."""
    writes = getattr(_collecting, "writes", None)
    if writes is None:
        return False
    writes.append((apply, item))
    return True


def apply_all(writes: list[Write]) -> None:
    """Commit ``writes`` in one transaction, each ``apply`` once with its items."""
    grouped: dict[Apply, list[Any]] = {}
    for apply, item in writes:
        grouped.setdefault(apply, []).append(item)
    with transaction.atomic():
        for apply, items in grouped.items():
            apply(items)
        # Written, not committed: the requests these writes belong to are not answered yet.
        pause_point("groupcommit.applied")


def _commit_in_thread(writes: list[Write]) -> None:
    # Tidy the thread's connection around each commit, as a request would.
    close_old_connections()
    try:
        apply_all(writes)
    finally:
        close_old_connections()


class GroupCommit:
    """The writes a process's requests deferred, committed a batch at a time."""

    def __init__(self, gathering: Callable[[], int] | None = None) -> None:
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="groupcommit")
        self.pending: list[tuple[list[Write], asyncio.Future]] = []
        self.running = False
        self.task: asyncio.Task | None = None
        # How many requests that may still defer writes run now (the front's count).
        self.gathering = gathering or (lambda: 0)

    async def commit(self, writes: list[Write]) -> None:
        """Return once ``writes`` are committed (with whatever else gathered); raise if not."""
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        self.pending.append((writes, done))
        if not self.running:
            self.running = True
            self.task = loop.create_task(self._drain())
        await done

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self.pending:
                await self._gather()
                batch, self.pending = self.pending, []
                writes = [write for writes, _ in batch for write in writes]
                try:
                    await loop.run_in_executor(self.executor, _commit_in_thread, writes)
                except Exception:
                    # One request's write should not fail its neighbours': each alone.
                    for writes, done in batch:
                        await self._alone(writes, done)
                else:
                    for _, done in batch:
                        if not done.done():
                            done.set_result(None)
        finally:
            self.running = False

    async def _gather(self) -> None:
        """Wait, up to ``GATHER_SECONDS``, for the requests that may still defer writes."""
        loop = asyncio.get_running_loop()
        until = loop.time() + GATHER_SECONDS
        while self.gathering() and loop.time() < until:
            await asyncio.sleep(GATHER_STEP)

    async def _alone(self, writes: list[Write], done: asyncio.Future) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self.executor, _commit_in_thread, writes)
        except Exception as exc:
            if not done.done():
                done.set_exception(exc)
        else:
            if not done.done():
                done.set_result(None)
