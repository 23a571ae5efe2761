"""Each new connection goes to the server process that holds the fewest.

gunicorn's workers all watch the one listening socket and leave the choice
to the kernel: every worker wakes for a new connection, and whichever calls
``accept()`` first takes it. Nothing evens them out. Worse, the event loop
of the first one awake takes every connection waiting at that moment, so a
burst (eight agents starting at once) lands on one process. Clients keep
their connections (keep-alive, long-polls), so that process then serves
them all on one core while the other idles: in ``make bench`` on
PostgreSQL, a send phase whose eight connections land 8 and 0 runs about a
quarter slower than one that lands 4 and 4 (figures in docs/internals.md).

So the workers share a table, the ``Board``: for each live worker, how many
connections it holds, from the moment it accepts one, and how many it ever
accepted. When the socket is readable, a worker accepts only if no other
live worker holds fewer. Otherwise it stops watching the socket for
``YIELD_SECONDS``, the other worker, woken by the same readiness, takes the
connection, and then it looks again. Each worker counts a connection the
moment it accepts it, so in a burst the workers take turns and neither
takes two more than the other. If no worker accepts anything for
``PATIENCE_SECONDS`` while a connection waits (the one that holds fewer is
busy, stopped or exiting), the worker that was leaving it takes it: that is
the longest a connection waits. The worker that holds fewest never waits.

The board is an anonymous shared mapping. gunicorn's master creates it
before it forks the first worker (``gunicorn_config.on_starting``), and
the workers inherit it. The master gives each worker a slot as it forks it
(``pre_fork``) and empties the slot when the worker is gone
(``child_exit``). A worker writes its pid in its slot when it starts to
accept, so a worker still loading the application is not waited for. A
worker without a slot accepts as gunicorn's would (``asgi_worker.Worker``):
for example, one started without plumb's gunicorn configuration.

The accepting itself is asyncio's public ``add_reader`` and
``connect_accepted_socket``, in place of ``create_server``, whose servers
accept whatever is waiting and cannot be told to let a connection be.
"""

from __future__ import annotations

import asyncio
import errno
import mmap
import os
import socket
import struct
from collections.abc import Callable, Iterable
from typing import Any

# A worker that holds more than another leaves a new connection to it, looking again
# this often, for at most PATIENCE_SECONDS while no worker accepts anything.
YIELD_SECONDS = 0.001
PATIENCE_SECONDS = 0.01
# Connections accepted per readiness at most (asyncio's figure; FILE_RESERVE allows for it).
BURST = 100
# Out of files or memory: accept again after this long, as asyncio does.
RETRY_SECONDS = 1.0
SLOTS = 256
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

_HEADER = struct.Struct("q")  # slots ever given out (the highest index + 1)
# The worker's pid (0: none yet, or gone), the connections it holds, those it ever accepted.
_SLOT = struct.Struct("qqq")


class Board:
    """The connections each worker holds, in memory the master shares with its workers."""

    def __init__(self, slots: int = SLOTS) -> None:
        self.slots = slots
        # Anonymous and MAP_SHARED (mmap's default): a forked worker writes the same pages.
        self._map = mmap.mmap(-1, _HEADER.size + slots * _SLOT.size)

    def claim(self, taken: Iterable[int | None]) -> int | None:
        """A free slot for a worker about to be forked (the master); None if all are taken."""
        busy = set(taken)
        for index in range(self.slots):
            if index not in busy:
                self._write(index, 0, 0, 0)
                _HEADER.pack_into(self._map, 0, max(self.used(), index + 1))
                return index
        return None

    def free(self, index: int | None) -> None:
        """The worker of ``index`` is gone (the master): its connections went with it."""
        if index is not None:
            self._write(index, 0, 0, 0)

    def used(self) -> int:
        return _HEADER.unpack_from(self._map, 0)[0]

    def read(self, index: int) -> tuple[int, int, int]:
        """(pid, connections held, connections ever accepted) of a slot."""
        return _SLOT.unpack_from(self._map, _HEADER.size + index * _SLOT.size)

    def accepted(self) -> int:
        """Connections the workers accepted, all told: it moves when any worker takes one."""
        return sum(self.read(index)[2] for index in range(self.used()))

    def _write(self, index: int, pid: int, held: int, accepted: int) -> None:
        _SLOT.pack_into(self._map, _HEADER.size + index * _SLOT.size, pid, held, accepted)

    def seat(self, index: int) -> Seat:
        """The slot ``index`` as the worker that holds it sees it (the worker)."""
        return Seat(self, index)


class Seat:
    """One worker's slot: what it holds, published, and the others' compared with it.

    Runs on the worker's event loop only. A connection counts from the
    moment the worker accepts it (``opened``) until its protocol lets it go
    or it is refused (``closed``, from ``asgi_worker.Connections``).
    """

    def __init__(self, board: Board, index: int) -> None:
        self.board = board
        self.index = index
        self.held = 0
        self._accepted = 0
        self._pid = os.getpid()
        self._publish()

    def opened(self) -> None:
        self.held += 1
        self._accepted += 1
        self._publish()

    def closed(self) -> None:
        self.held -= 1
        self._publish()

    def leave(self) -> None:
        """This worker accepts no more (it is shutting down): nobody waits for it."""
        self._pid = 0
        self._publish()

    def others_hold_fewer(self) -> bool:
        """Whether some other live worker holds fewer connections than this one."""
        for index in range(self.board.used()):
            if index != self.index:
                pid, held, _ = self.board.read(index)
                if pid and held < self.held:
                    return True
        return False

    def _publish(self) -> None:
        self.board._write(self.index, self._pid, self.held, self._accepted)


class Acceptor:
    """Accepts the connections of one listening socket for one worker.

    Stands in for the server ``loop.create_server`` returns (gunicorn's
    worker calls ``close`` and ``wait_closed`` on it). ``protocol_factory``
    and ``ssl`` are what gunicorn passed to ``create_server``; ``failed`` is
    called with the error of an ``accept()`` that ran out of files or memory.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        protocol_factory: Callable[[], asyncio.Protocol],
        seat: Seat,
        *,
        ssl: Any = None,
        failed: Callable[[OSError], None],
    ) -> None:
        self._loop = loop
        self._sock = sock
        self._factory = protocol_factory
        self._seat = seat
        self._ssl = ssl
        self._failed = failed
        self._watching = False
        self._closed = False
        self._retry: asyncio.TimerHandle | None = None
        # (the board's count of accepted connections, loop time) when this
        # worker began to leave a connection to the others.
        self._leaving: tuple[int, float] | None = None
        # Held until served: the loop keeps only weak references to its tasks.
        self._serving: set[asyncio.Task] = set()
        sock.setblocking(False)
        self._watch()

    def close(self) -> None:
        self._closed = True
        self._unwatch()
        self._seat.leave()
        if self._retry is not None:
            self._retry.cancel()

    async def wait_closed(self) -> None:
        return None

    def is_serving(self) -> bool:
        return not self._closed

    def _watch(self) -> None:
        if not self._closed and not self._watching:
            self._loop.add_reader(self._sock.fileno(), self._readable)
            self._watching = True

    def _unwatch(self) -> None:
        if self._watching:
            self._loop.remove_reader(self._sock.fileno())
            self._watching = False

    def _readable(self) -> None:
        for _ in range(BURST):
            if self._seat.others_hold_fewer() and not self._left_long_enough():
                self._pause(YIELD_SECONDS)
                return
            self._leaving = None
            if not self._take():
                return

    def _left_long_enough(self) -> bool:
        """Whether no worker has accepted anything for PATIENCE_SECONDS while this one waited.

        A connection the others took ends the wait; one still there after
        that long is taken here: the worker that holds fewer is busy, stopped
        or exiting.
        """
        accepted, now = self._seat.board.accepted(), self._loop.time()
        if self._leaving is None or self._leaving[0] != accepted:
            self._leaving = (accepted, now)
            return False
        return now - self._leaving[1] >= PATIENCE_SECONDS

    def _pause(self, seconds: float) -> None:
        self._unwatch()
        self._retry = self._loop.call_later(seconds, self._resume)

    def _resume(self) -> None:
        self._retry = None
        self._watch()  # readable again if a connection still waits

    def _take(self) -> bool:
        """Accept one connection; False when there is none to take now."""
        try:
            conn, _ = self._sock.accept()
        except (BlockingIOError, InterruptedError):
            return False  # nothing waits (another worker took it)
        except ConnectionAbortedError:
            return True  # the client left before it was accepted
        except OSError as exc:
            if exc.errno not in _OUT_OF_RESOURCES:
                raise
            self._failed(exc)
            self._pause(RETRY_SECONDS)
            return False
        self._seat.opened()
        task = self._loop.create_task(self._serve(conn))
        self._serving.add(task)
        task.add_done_callback(self._serving.discard)
        return True

    async def _serve(self, conn: socket.socket) -> None:
        try:
            await self._loop.connect_accepted_socket(self._factory, conn, ssl=self._ssl)
        except Exception:
            # The client left, or its TLS handshake failed, before the protocol
            # had the connection: asyncio's server drops it the same way.
            conn.close()
            self._seat.closed()


BOARD: Board | None = None


def open_board() -> Board:
    """The board of this server (gunicorn's master, before the first fork)."""
    global BOARD
    BOARD = Board()
    return BOARD


def seat(slot: int | None, *, own_socket: bool = False) -> Seat | None:
    """This worker's seat on the board it inherited, if its master gave it a slot.

    None as well for a worker with a listening socket of its own (gunicorn's
    ``reuse_port``): the kernel shares connections between such sockets, and
    one left in this worker's socket is never another worker's to take.
    """
    if BOARD is None or slot is None or own_socket:
        return None
    return BOARD.seat(slot)
