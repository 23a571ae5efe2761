"""The workers even out their connections (plumb_site/accept.py), without a server.

Two workers are two ``Acceptor``s on one uvloop loop, each watching its own
descriptor of one listening socket, as two processes do: both are woken by
the same readiness, and the loop runs them one after the other, so what
each takes is decided by the board alone. ``tests/scale/test_even_workers.py``
shows the same with gunicorn's processes.
"""

from __future__ import annotations

import asyncio
import errno
import multiprocessing
import os
import socket

import pytest
import uvloop

from plumb_site import accept
from plumb_site.accept import Acceptor, Board

BURST = 8
DEADLINE = 10.0  # seconds for a loop to accept what the test connected


class Held(asyncio.Protocol):
    """Holds its connection until it closes, as the worker's connections tracker does."""

    def __init__(self, seat: accept.Seat, taken: list[Held]) -> None:
        self.seat = seat
        self.taken = taken

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.taken.append(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.seat.closed()


@pytest.fixture
def loop():
    loop = uvloop.new_event_loop()
    try:
        yield loop
    finally:
        loop.close()


@pytest.fixture
def listener():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    try:
        yield sock
    finally:
        sock.close()


class Worker:
    """One worker: its seat on the board, its descriptor of the socket, what it took."""

    def __init__(self, loop, listener: socket.socket, board: Board, index: int) -> None:
        self.seat = board.seat(index)
        self.sock = socket.socket(fileno=os.dup(listener.fileno()))
        self.taken: list[Held] = []
        self.failures: list[OSError] = []
        self.acceptor = Acceptor(
            loop,
            self.sock,
            lambda: Held(self.seat, self.taken),
            self.seat,
            failed=self.failures.append,
        )

    def close(self) -> None:
        self.acceptor.close()
        for held in self.taken:
            held.transport.close()
        self.sock.close()


def board_with(count: int) -> Board:
    board = Board(slots=8)
    for _ in range(count):
        board.claim(range(board.used()))
    return board


def connect(listener: socket.socket, count: int) -> list[socket.socket]:
    """``count`` connections, each complete in the backlog before anything accepts."""
    return [socket.create_connection(listener.getsockname()) for _ in range(count)]


def run_until(loop, done) -> None:
    async def wait() -> None:
        while not done():
            await asyncio.sleep(0.001)

    loop.run_until_complete(asyncio.wait_for(wait(), DEADLINE))


def recorded_waits(monkeypatch) -> list[float]:
    """Each wait an ``Acceptor`` takes, in seconds, as it takes it.

    Recorded rather than failed inside the loop's callback, where an error
    is only logged.
    """
    waits: list[float] = []
    pause = Acceptor._pause
    monkeypatch.setattr(
        Acceptor, "_pause", lambda self, seconds: (waits.append(seconds), pause(self, seconds))
    )
    return waits


def test_the_master_gives_each_worker_a_free_slot_and_takes_it_back():
    board = Board(slots=4)
    assert board.claim([]) == 0
    assert board.claim([0]) == 1
    assert board.claim([1]) == 0  # worker 0 exited: its slot is free again
    assert board.claim([0, 1, 2, 3]) is None
    assert board.used() == 2
    board.seat(1).opened()
    board.free(1)
    assert board.read(1) == (0, 0, 0)


def _hold_three(board: Board) -> None:
    seat = board.seat(1)
    for _ in range(3):
        seat.opened()


def test_a_worker_has_a_seat_only_on_its_masters_board_and_a_shared_socket(monkeypatch):
    monkeypatch.setattr(accept, "BOARD", None)
    assert accept.seat(0) is None  # started without plumb's gunicorn configuration
    board = accept.open_board()
    assert accept.seat(None) is None  # past the board's slots
    assert accept.seat(0, own_socket=True) is None  # gunicorn's reuse_port
    assert accept.seat(0).board is board


def test_a_forked_worker_writes_where_its_master_and_siblings_read():
    board = board_with(2)
    child = multiprocessing.get_context("fork").Process(target=_hold_three, args=(board,))
    child.start()
    child.join(DEADLINE)
    assert child.exitcode == 0
    assert board.read(1) == (child.pid, 3, 3)


def test_a_worker_yields_only_to_a_live_worker_that_holds_fewer():
    board = board_with(3)
    mine = board.seat(0)
    mine.opened()
    mine.opened()
    assert not mine.others_hold_fewer()  # the others are not accepting yet (no pid)
    other = board.seat(1)
    other.opened()
    other.opened()
    assert not mine.others_hold_fewer()
    other.closed()
    assert mine.others_hold_fewer()
    board.free(1)  # that worker exited
    assert not mine.others_hold_fewer()
    board.seat(2)
    assert mine.others_hold_fewer()
    mine.closed()
    mine.closed()
    assert not mine.others_hold_fewer()


@pytest.mark.parametrize("evened", [True, False])
def test_a_burst_of_connections_is_shared_between_the_workers(loop, listener, monkeypatch, evened):
    if not evened:
        # Without the board's say, the first worker awake takes all that waits.
        monkeypatch.setattr(accept.Seat, "others_hold_fewer", lambda self: False)
    board = board_with(2)
    workers = [Worker(loop, listener, board, index) for index in range(2)]
    clients = connect(listener, BURST)
    try:
        run_until(loop, lambda: sum(len(w.taken) for w in workers) == BURST)
        shares = sorted(len(w.taken) for w in workers)
        if evened:
            assert shares == [BURST // 2, BURST // 2]
            assert [board.read(i)[1:] for i in range(2)] == [(BURST // 2, BURST // 2)] * 2
        else:
            assert shares == [0, BURST]
    finally:
        for worker in workers:
            worker.close()
        for client in clients:
            client.close()


def test_a_connection_no_other_worker_takes_is_taken_after_the_wait(loop, listener, monkeypatch):
    board = board_with(2)
    board.seat(1)  # a live worker that holds nothing and never accepts (busy, or stopped)
    worker = Worker(loop, listener, board, 0)
    worker.seat.opened()  # it holds one already
    waits = recorded_waits(monkeypatch)
    clients = connect(listener, 2)
    try:
        run_until(loop, lambda: len(worker.taken) == 2)
        # It left each to the other worker, looking again now and then, and took it.
        assert len(waits) >= 2
        assert set(waits) == {accept.YIELD_SECONDS}
    finally:
        worker.close()
        for client in clients:
            client.close()


def test_a_connection_another_worker_takes_starts_the_wait_afresh(loop, listener):
    board = board_with(2)
    other = board.seat(1)
    worker = Worker(loop, listener, board, 0)
    worker.seat.opened()
    acceptor = worker.acceptor
    loop.time = lambda: 100.0
    assert not acceptor._left_long_enough()  # the wait begins
    loop.time = lambda: 100.0 + accept.PATIENCE_SECONDS
    other.opened()  # meanwhile the other worker took a connection
    assert not acceptor._left_long_enough()  # a new wait, for the next one
    loop.time = lambda: 100.0 + 3 * accept.PATIENCE_SECONDS
    assert acceptor._left_long_enough()
    worker.close()


def test_the_worker_that_holds_fewest_accepts_at_once(loop, listener, monkeypatch):
    board = board_with(2)
    busier = board.seat(1)
    for _ in range(3):
        busier.opened()
    worker = Worker(loop, listener, board, 0)
    waits = recorded_waits(monkeypatch)
    clients = connect(listener, 3)
    try:
        run_until(loop, lambda: len(worker.taken) == 3)
        assert waits == []
    finally:
        worker.close()
        for client in clients:
            client.close()


class OutOfFiles(socket.socket):
    """A listening socket whose first ``accept()`` finds no file left."""

    failed = False

    def accept(self):
        if not self.failed:
            self.failed = True
            raise OSError(errno.EMFILE, "Too many open files")
        return super().accept()


def test_an_accept_out_of_files_is_reported_and_tried_again_later(loop, listener, monkeypatch):
    monkeypatch.setattr(accept, "RETRY_SECONDS", 0.01)
    board = board_with(1)
    seat = board.seat(0)
    sock = OutOfFiles(fileno=os.dup(listener.fileno()))
    taken: list[Held] = []
    failures: list[OSError] = []
    acceptor = Acceptor(loop, sock, lambda: Held(seat, taken), seat, failed=failures.append)
    client = socket.create_connection(listener.getsockname())
    try:
        run_until(loop, lambda: len(taken) == 1)
        assert [f.errno for f in failures] == [errno.EMFILE]
    finally:
        acceptor.close()
        for held in taken:
            held.transport.close()
        sock.close()
        client.close()


def test_a_closed_acceptor_takes_nothing_more_and_is_waited_for_no_more(loop, listener):
    board = board_with(1)
    worker = Worker(loop, listener, board, 0)
    worker.acceptor.close()
    assert not worker.acceptor.is_serving()
    assert board.read(0)[0] == 0  # the other workers wait for it no more
    client = socket.create_connection(listener.getsockname())
    try:
        loop.run_until_complete(asyncio.sleep(0.05))
        assert worker.taken == []
    finally:
        worker.close()
        client.close()
