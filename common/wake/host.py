"""Wake-ups between the processes of one host: Unix datagrams (SQLite).

Each server process that listens (``Listener``, from ``listen`` in the ASGI
lifespan) binds a Unix datagram socket in ``VAR_DIR/wake/``; at commit each
publication goes to every socket there, one datagram each (``send``). The
kernel holds it until the listener's event loop reads it.

**No wake-up is lost** (SPEC §3.3). The kernel queues at most
``net.unix.max_dgram_qlen`` datagrams for a socket (10 by default, however
large its buffer) and refuses more while its reader is busy. A datagram the
kernel refuses is *held*, never dropped: the sending process keeps the
topics it owes each listener, later publications join them rather than
overtake them, and one thread (started at the first refusal) waits for room
in those listeners' queues and then sends all that each is owed in one
datagram. Room comes: a queue is full only of datagrams its listener has
yet to read, and each one read frees a place, which the kernel reports by
making the socket connected to that listener writable (``poll``). So
whatever a listener missed while it fell behind reaches it in one datagram
as soon as it reads again, and it delivers all that is queued at once.
What one listener is owed past ``MAX_DATAGRAM`` bytes becomes ``*`` (wake
everything). A listener whose process is gone is forgotten and its socket
removed. Only the sender's death can lose what it owes: a process that
exits waits up to ``EXIT_WAIT`` seconds for its listeners to take it (a
command that commits and exits at once), and one killed outright loses it,
as it loses any work after its commit.

A *sparse* topic (``topics.sparse``: few wait on its kind, many publish it)
goes only to the listeners whose process waits on its kind, as the process
announces with a file beside its socket (``<socket>~<kind>``) from before
its first such subscription to after its last. The scan that finds the
sockets finds those files; a file made after the scan is a waiter's that
has yet to look, and its look sees the commit being published.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import glob
import logging
import os
import secrets
import select
import socket
import threading
from collections.abc import Collection, Iterable
from pathlib import Path

from django.conf import settings

from common import metrics
from common.pause import pause_point
from common.wake import topics as _topics
from common.wake.topics import WAKE_ALL, deliver

# One logger for the package, whichever module writes: its records carry one name to match.
logger = logging.getLogger("common.wake")

MAX_DATAGRAM = 32_768  # bytes owed to one listener past which it is sent "*" instead
READ_BATCH = 1_000  # datagrams a listener reads before it lets its event loop run again
EXIT_WAIT = 5.0  # seconds an exiting process waits for its listeners to take what it owes


def wake_dir() -> Path:
    return Path(settings.VAR_DIR) / "wake"


@functools.lru_cache(maxsize=8)
def _scanned(var_dir: str | os.PathLike) -> str:
    """``wake_dir()`` as text, for the scan at every commit.

    Keyed by ``VAR_DIR``, which tests change; building a ``Path`` at each
    commit would be 4% of a send's bytecode.
    """
    return os.path.join(var_dir, "wake")


_own_address: str | None = None


class _Peer:
    """Another listening process of this host, as this process sends to it."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setblocking(False)
        try:
            # Connected, so that poll() says when this listener's queue has room.
            self.sock.connect(address)
        except OSError:
            self.sock.close()
            raise
        self.owed: set[str] = set()
        self._owed_bytes = 0

    def owe(self, topics: Iterable[str]) -> None:
        if WAKE_ALL in self.owed:
            return
        for topic in topics:
            if topic not in self.owed:
                self.owed.add(topic)
                self._owed_bytes += len(topic) + 1
        if self._owed_bytes > MAX_DATAGRAM:
            self.owed = {WAKE_ALL}

    def paid(self) -> None:
        self.owed = set()
        self._owed_bytes = 0


class _HostSender:
    """This process's publications to the host's other listeners, and what it owes them."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._all_paid = threading.Condition(self._guard)
        self._peers: dict[str, _Peer] = {}
        # A byte in this pipe interrupts the payer's poll: a listener is newly owed.
        self._kick_read, self._kick_write = os.pipe()
        os.set_blocking(self._kick_read, False)
        os.set_blocking(self._kick_write, False)
        self._payer: threading.Thread | None = None

    def send(self, topics: Collection[str]) -> None:
        addresses: set[str] = set()
        waits_on: dict[str, set[str]] = {}  # address: the sparse kinds its process waits on
        try:
            for entry in os.scandir(_scanned(settings.VAR_DIR)):
                if entry.name.endswith(".sock"):
                    addresses.add(entry.path)
                else:
                    address, tilde, kind = entry.path.rpartition(ANNOUNCED)
                    if tilde:
                        waits_on.setdefault(address, set()).add(kind)
        except FileNotFoundError:
            return
        pause_point("wake.host.scanned")
        addresses.discard(_own_address)  # delivered in-process already
        sparse = {t: kind for t in topics if (kind := _topics.sparse_kind(t)) is not None}
        held = 0
        with self._guard:
            for address in self._peers.keys() - addresses:
                self._forget(self._peers[address])
            for address in addresses:
                its = topics
                if sparse:
                    kinds = waits_on.get(address, ())
                    its = [t for t in topics if t not in sparse or sparse[t] in kinds]
                    if not its:
                        continue
                peer = self._peers.get(address) or self._connect(address)
                if peer is None:
                    continue
                if peer.owed:
                    # Behind what it is owed already, and sent with it.
                    peer.owe(its)
                elif not self._send(peer, its):
                    peer.owe(its)
                    held += 1
            if held:
                self._start_payer()
        if held:
            metrics.WAKE_HELD.inc(held)

    def _connect(self, address: str) -> _Peer | None:
        try:
            peer = _Peer(address)
        except ConnectionRefusedError:
            _remove(address)  # its process is gone
            return None
        except OSError:
            return None  # removed since the scan
        self._peers[address] = peer
        return peer

    def _forget(self, peer: _Peer, *, unlink: bool = False) -> None:
        del self._peers[peer.address]
        peer.sock.close()
        if unlink:
            _remove(peer.address)

    def _send(self, peer: _Peer, topics: Collection[str]) -> bool:
        """Send ``topics`` to ``peer`` in one datagram; False if its queue is full."""
        payload = " ".join(topics).encode()
        if len(payload) > MAX_DATAGRAM:
            payload = WAKE_ALL.encode()
        try:
            peer.sock.send(payload)
        except BlockingIOError:
            return False
        except ConnectionRefusedError:
            self._forget(peer, unlink=True)  # its process is gone, and its waiters with it
        except OSError:
            logger.warning("wake-ups: cannot send to %s", peer.address, exc_info=True)
            self._forget(peer)  # connected again at the next publication
        return True

    def _start_payer(self) -> None:
        if self._payer is None:
            self._payer = threading.Thread(target=self._pay, name="wake-payer", daemon=True)
            self._payer.start()
            atexit.register(self.pay_before_exit)
        with contextlib.suppress(BlockingIOError):
            os.write(self._kick_write, b"\0")

    def _pay(self) -> None:
        """The payer thread: wait for room in the queues of listeners owed anything; send."""
        while True:
            with self._guard:
                owing = {p.sock.fileno(): p for p in self._peers.values() if p.owed}
                if not owing:
                    self._all_paid.notify_all()
            poller = select.poll()
            poller.register(self._kick_read, select.POLLIN)
            for fd in owing:
                poller.register(fd, select.POLLOUT)
            ready = poller.poll()
            with self._guard:
                for fd, _ in ready:
                    if fd == self._kick_read:
                        with contextlib.suppress(BlockingIOError):
                            os.read(fd, 4096)
                        continue
                    peer = owing[fd]
                    # Forgotten meanwhile (and its descriptor perhaps reused): skipped.
                    if self._peers.get(peer.address) is peer and self._send(peer, peer.owed):
                        peer.paid()

    def paid_up(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until nothing is owed; whether nothing is."""
        with self._guard:
            return self._all_paid.wait_for(
                lambda: not any(p.owed for p in self._peers.values()), timeout
            )

    def pay_before_exit(self) -> None:
        if not self.paid_up(EXIT_WAIT):
            logger.warning(
                "wake-ups: exiting with wake-ups owed to listeners that read nothing for %g s",
                EXIT_WAIT,
            )


def _remove(address: str) -> None:
    """Remove a listener's socket and the files announcing what its process waits on."""
    for path in [address, *glob.glob(glob.escape(address) + ANNOUNCED + "*")]:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


ANNOUNCED = "~"  # "<socket>~<kind>": that listener's process waits on the sparse kind


def _announce(kind: str, held: bool) -> None:
    """Say (or stop saying) beside this process's socket that it waits on ``kind``."""
    if _own_address is None:
        return
    path = _own_address + ANNOUNCED + kind
    if held:
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


_host: _HostSender | None = None
_host_guard = threading.Lock()


def send(topics: Collection[str]) -> None:
    """Send ``topics`` to every other listening process of this host, or owe them (see above)."""
    global _host
    with _host_guard:
        if _host is None:
            _host = _HostSender()
        host = _host
    host.send(topics)


def _after_fork_in_child() -> None:
    """A forked child owes nothing: its parent pays, and the child has no payer thread."""
    global _host, _host_guard
    if _host is not None:
        atexit.unregister(_host.pay_before_exit)
    _host, _host_guard = None, threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


class Listener:
    """This process's datagram socket, read by the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        global _own_address
        directory = wake_dir()
        directory.mkdir(mode=0o700, exist_ok=True)
        self.path = str(directory / f"{os.getpid()}-{secrets.token_hex(4)}.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        self.sock.bind(self.path)
        self.sock.setblocking(False)
        self.loop = loop
        loop.add_reader(self.sock.fileno(), self._readable)
        _own_address = self.path
        _topics.announcing(_announce)

    def _readable(self) -> None:
        # All that is queued, delivered at once: a burst wakes each waiter once.
        topics: set[str] = set()
        for _ in range(READ_BATCH):
            try:
                datagram = self.sock.recv(65536)
            except BlockingIOError:
                break
            topics.update(datagram.decode("ascii", "replace").split(" "))
        if topics:
            deliver(topics)

    def close(self) -> None:
        global _own_address
        _topics.announcing(None)
        self.loop.remove_reader(self.sock.fileno())
        self.sock.close()
        _remove(self.path)
        _own_address = None
