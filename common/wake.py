"""Wake-ups: a commit names the topics it concerns, and whoever waits on one of them wakes.

A topic is a short string a service makes up (``"n:7"``: notes for name 7,
``"r:5"``: events of room 5). A waiter *subscribes* to its topics before it
looks at the database, then waits; a writer *publishes* its topics when its
transaction commits. Subscribing first means a commit between the look and
the wait is never missed: it wakes the subscription, and the wait returns at
once.

Where a publication reaches, and what it costs while nothing happens (nothing):

* **This process**: subscriptions live in a dictionary of topics. A thread
  waits on an ``Event``; a coroutine of the server's event loop on a future
  (``Subscription.wait_async``), so a waiting request holds no thread.
* **The other processes of this host** (SQLite): each server process that
  listens (``listen``, from the ASGI lifespan) binds a Unix datagram socket
  in ``VAR_DIR/wake/``; a commit sends one datagram to every socket there.
  The kernel holds it until the listener's event loop reads it.
* **Every process of every host** (PostgreSQL): the transaction runs
  ``NOTIFY plumb_wake``, which PostgreSQL delivers at commit, and only then,
  to every listening connection: one per server process (``listen``).

A publication may carry its publisher's *mark* (``"p:7#ab12"``): it wakes
the subscriptions to its topic (``"p:7"``) except those made with the same
mark. A waiter that announces itself (a poll superseding older polls of its
session) is so never woken by its own announcement, which on PostgreSQL
comes back to its process through LISTEN after it has subscribed: under
load, those echoes were a third of the requests a poll server ran.

A lost wake-up (a full socket buffer, a listener reconnecting) costs latency,
never correctness: waiters give up at their deadline and look again, and a
listener that reconnects wakes everything it serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, transaction

logger = logging.getLogger(__name__)

CHANNEL = "plumb_wake"
WAKE_ALL = "*"  # a listener that may have missed publications wakes every subscription
MARK = "#"  # "topic#mark": wakes the topic's subscriptions but those of that mark
RECONNECT_DELAY = 1.0  # seconds before a lost LISTEN connection is opened again


class Subscription:
    """One waiter's topics; woken at most once, by the first publication of any of them."""

    def __init__(self, topics: frozenset[str], mark: str | None = None) -> None:
        self.topics = topics
        self.mark = mark
        self._guard = threading.Lock()
        self._event = threading.Event()
        self._future: asyncio.Future | None = None

    @property
    def woken(self) -> bool:
        return self._event.is_set()

    def wake(self) -> None:
        with self._guard:
            self._event.set()
            future = self._future
        if future is not None:
            future.get_loop().call_soon_threadsafe(_resolve, future)

    def wait(self, timeout: float) -> bool:
        """Block this thread until woken, or ``timeout`` passes; whether it was woken."""
        return self._event.wait(timeout)

    async def wait_async(self, timeout: float) -> bool:
        """Wait on the running event loop, holding no thread; whether it was woken."""
        loop = asyncio.get_running_loop()
        with self._guard:
            if self._event.is_set():
                return True
            self._future = future = loop.create_future()
        # asyncio.wait, not wait_for: nothing is cancelled, so nothing can be lost.
        await asyncio.wait({future}, timeout=max(timeout, 0))
        return self._event.is_set()


def _resolve(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


class Parked(BaseException):
    """A waiting call that sleeps on the server's event loop instead of its thread.

    Raised by a wait where the server allows it (``parking``); it unwinds the
    request, whose thread goes back to the pool, up to the server's front
    (``plumb_site/asgi.py``), which waits on ``subscription`` and then runs
    the request again with ``Resumed``. A ``BaseException``, so that no
    ``except Exception`` on the way (DRF, the MCP door, Django's handler)
    mistakes it for a failure.
    """

    def __init__(self, subscription: Subscription, deadline: float, ticket: str) -> None:
        super().__init__()
        self.subscription = subscription
        self.deadline = deadline
        self.ticket = ticket


class Resumed:
    """What a parked call knows when its request runs again."""

    def __init__(self, deadline: float, ticket: str, woken: bool) -> None:
        self.deadline = deadline
        self.ticket = ticket
        self.woken = woken


_parking = threading.local()


@contextlib.contextmanager
def parking(*, allowed: bool, resumed: Resumed | None = None) -> Iterator[None]:
    """Run a request whose waits may park (``allowed``), perhaps resuming a parked one."""
    _parking.allowed, _parking.resumed = allowed, resumed
    try:
        yield
    finally:
        _parking.allowed, _parking.resumed = False, None


def may_park() -> bool:
    return getattr(_parking, "allowed", False)


def resumed() -> Resumed | None:
    """The parked call this request resumes, once: a second wait in it starts afresh."""
    state = getattr(_parking, "resumed", None)
    _parking.resumed = None
    return state


_subscriptions: dict[str, set[Subscription]] = {}
_subscriptions_guard = threading.Lock()


def subscribe(topics: Iterable[str], *, mark: str | None = None) -> Subscription:
    """Start collecting wake-ups for ``topics``; ``unsubscribe`` it when done.

    Publications carrying ``mark`` (``"topic#mark"``) do not wake it.
    """
    subscription = Subscription(frozenset(topics), mark)
    with _subscriptions_guard:
        for topic in subscription.topics:
            _subscriptions.setdefault(topic, set()).add(subscription)
    return subscription


def unsubscribe(subscription: Subscription) -> None:
    with _subscriptions_guard:
        for topic in subscription.topics:
            waiting = _subscriptions.get(topic)
            if waiting is not None:
                waiting.discard(subscription)
                if not waiting:
                    del _subscriptions[topic]


@contextlib.contextmanager
def subscribed(topics: Iterable[str], *, mark: str | None = None) -> Iterator[Subscription]:
    subscription = subscribe(topics, mark=mark)
    try:
        yield subscription
    finally:
        unsubscribe(subscription)


def subscriptions() -> int:
    """How many distinct subscriptions this process holds (for metrics and tests)."""
    with _subscriptions_guard:
        return len({s for waiting in _subscriptions.values() for s in waiting})


def deliver(topics: Iterable[str]) -> None:
    """Wake this process's subscriptions to any of ``topics`` (``*``: all of them).

    A marked topic (``"topic#mark"``) spares the subscriptions of its mark.
    """
    topics = set(topics)
    with _subscriptions_guard:
        if WAKE_ALL in topics:
            woken = {s for waiting in _subscriptions.values() for s in waiting}
        else:
            woken = set()
            for marked in topics:
                topic, _, mark = marked.partition(MARK)
                woken.update(s for s in _subscriptions.get(topic, ()) if not mark or s.mark != mark)
    for subscription in woken:
        subscription.wake()


# --- publishing ---------------------------------------------------------------------------


def publish(topics: Iterable[str], *, using: str = DEFAULT_DB_ALIAS) -> None:
    """Wake the waiters of ``topics`` once the current transaction commits (at once outside one).

    On PostgreSQL the NOTIFY is sent inside the transaction, so it reaches
    other hosts exactly when the rows become visible, and not at all on a
    rollback.
    """
    topics = sorted(set(topics))
    if not topics:
        return
    payload = " ".join(topics)
    connection = connections[using]
    if connection.vendor == "postgresql":
        # Every process listens on the channel, this host's included.
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, payload])
        transaction.on_commit(lambda: deliver(topics), using=using)
    else:
        transaction.on_commit(lambda: _after_commit(payload), using=using)


def _after_commit(payload: str) -> None:
    deliver(payload.split(" "))
    _send_to_host(payload.encode())


# --- between the processes of one host ------------------------------------------------------


def wake_dir() -> Path:
    return Path(settings.VAR_DIR) / "wake"


_sender: socket.socket | None = None
_sender_guard = threading.Lock()
_own_address: str | None = None


def _send_to_host(datagram: bytes) -> None:
    """One datagram to every other listening process of this host; stale sockets are removed."""
    global _sender
    try:
        addresses = [entry.path for entry in os.scandir(wake_dir()) if entry.name.endswith(".sock")]
    except FileNotFoundError:
        return
    with _sender_guard:
        if _sender is None:
            _sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            _sender.setblocking(False)
        for address in addresses:
            if address == _own_address:
                continue  # delivered in-process already
            try:
                _sender.sendto(datagram, address)
            except (ConnectionRefusedError, FileNotFoundError):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(address)  # its process is gone
            except BlockingIOError:
                logger.warning("wake-up dropped: the listener at %s is not reading", address)


class _HostListener:
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

    def _readable(self) -> None:
        while True:
            try:
                datagram = self.sock.recv(65536)
            except BlockingIOError:
                return
            deliver(datagram.decode("ascii", "replace").split(" "))

    def close(self) -> None:
        global _own_address
        self.loop.remove_reader(self.sock.fileno())
        self.sock.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        _own_address = None


# --- between hosts: PostgreSQL's LISTEN -----------------------------------------------------


def _listen_params(using: str) -> dict:
    conf = connections[using].settings_dict
    params = {
        key: value
        for key, value in conf.get("OPTIONS", {}).items()
        if key not in {"pool", "server_side_binding", "isolation_level", "assume_role"}
    }
    params.update(dbname=conf["NAME"], autocommit=True)
    for key, name in (("user", "USER"), ("password", "PASSWORD"), ("host", "HOST")):
        if conf.get(name):
            params[key] = conf[name]
    if conf.get("PORT"):
        params["port"] = int(conf["PORT"])
    return params


async def _listen_postgres(using: str) -> None:
    """Hold one LISTEN connection, forever; after any loss, reconnect and wake everyone."""
    import psycopg

    while True:
        try:
            async with await psycopg.AsyncConnection.connect(**_listen_params(using)) as conn:
                await conn.execute(f"LISTEN {CHANNEL}")
                deliver([WAKE_ALL])  # anything published while we were not listening
                async for notify in conn.notifies():
                    deliver(notify.payload.split(" "))
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.warning("wake-ups: the LISTEN connection failed; reconnecting", exc_info=True)
        await asyncio.sleep(RECONNECT_DELAY)


class Listening:
    """What ``listen`` started in a process; ``close`` stops it."""

    def __init__(self, host: _HostListener | None, postgres: asyncio.Task | None) -> None:
        self.host = host
        self.postgres = postgres

    async def close(self) -> None:
        if self.host is not None:
            self.host.close()
        if self.postgres is not None:
            self.postgres.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.postgres


def listen(*, using: str = DEFAULT_DB_ALIAS) -> Listening:
    """Receive other processes' (and, on PostgreSQL, other hosts') publications on this loop."""
    loop = asyncio.get_running_loop()
    if connections[using].vendor == "postgresql":
        return Listening(None, loop.create_task(_listen_postgres(using)))
    return Listening(_HostListener(loop), None)
