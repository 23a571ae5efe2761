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
  in ``VAR_DIR/wake/``; at commit each publication goes to every socket
  there, one datagram each. The kernel holds it until the listener's event
  loop reads it.
* **Every process of every host** (PostgreSQL): the transaction runs
  ``NOTIFY plumb_wake``, which PostgreSQL delivers at commit, and only then,
  to every listening connection: one per server process (``listen``).

A publication may carry its publisher's *mark* (``"p:7#ab12"``): it wakes
the subscriptions to its topic (``"p:7"``) except those made with the same
mark. A waiter that announces itself (a poll superseding older polls of its
session) is so never woken by its own announcement, which on PostgreSQL
comes back to its process through LISTEN after it has subscribed: under
load, those echoes were a third of the requests a poll server ran.

A publication may carry a *number* (``"w:3@812"``: note 812, for whoever
comes next to workspace 3) and a subscription a *ceiling* (``"w:3@800"``):
the subscription is woken only by publications of its topic numbered at most
its ceiling, or not numbered. A session receives the "next" notes whose ids
are at most its watermark (SPEC §3.4), so a note sent after every waiting
session started wakes none of them: none could receive it.

**No wake-up is lost** (SPEC §3.3): whatever the burst of commits, each
publication reaches every listener that existed when it was sent.

* *Between the processes of a host*, the kernel queues at most
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
* *Between hosts*, PostgreSQL queues each NOTIFY for every listening
  connection (up to 8 GB) and drops none. A listener that loses its
  connection connects again and wakes everything it serves: it may have
  missed publications meanwhile. A connection that dies silently (a host or
  a NAT that vanished: a half-open connection, which TCP alone notices only
  after hours) is found by TCP keepalives and by a check every
  ``CHECK_INTERVAL`` seconds: a query unanswered within ``CHECK_TIMEOUT``
  ends it, and the listener connects again and wakes everything. So the
  wake-ups a dead connection swallowed come late, by those two intervals at
  most, and are never lost; ``plumb_wake_listen_heard_timestamp_seconds``
  says when the stalest listener last heard from PostgreSQL.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import secrets
import select
import socket
import threading
from collections.abc import Collection, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.models import BooleanField, Func, Value

from common import metrics

if TYPE_CHECKING:
    import psycopg

logger = logging.getLogger(__name__)

CHANNEL = "plumb_wake"
WAKE_ALL = "*"  # a listener that may have missed publications wakes every subscription
MARK = "#"  # "topic#mark": wakes the topic's subscriptions but those of that mark
NUMBER = "@"  # "topic@n": published, a thing numbered n; subscribed, things numbered n at most
RECONNECT_DELAY = 1.0  # seconds before a lost LISTEN connection is opened again
MAX_DATAGRAM = 32_768  # bytes owed to one listener past which it is sent "*" instead
READ_BATCH = 1_000  # datagrams a listener reads before it lets its event loop run again
EXIT_WAIT = 5.0  # seconds an exiting process waits for its listeners to take what it owes
# The LISTEN connection's TCP keepalives (libpq's names): probes after 30 s of
# silence, a dead peer given up after three more unanswered 10 s apart.
KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
}
CHECK_INTERVAL = 10.0  # seconds between two checks that the LISTEN connection still answers
CHECK_TIMEOUT = 5.0  # seconds a check waits for its answer before the connection is given up
APPLICATION_NAME = "plumb-wake"  # how the LISTEN connections show in pg_stat_activity


class Subscription:
    """One waiter's topics; woken at most once, by the first publication of any of them."""

    def __init__(self, topics: Iterable[str], mark: str | None = None) -> None:
        self.topics = frozenset(topics)  # as subscribed, ceilings included
        self.mark = mark
        ceilings: dict[str, list[int | None]] = {}
        for spec in self.topics:
            topic, _, ceiling = spec.partition(NUMBER)
            ceilings.setdefault(topic, []).append(int(ceiling) if ceiling.isdigit() else None)
        self.keys = frozenset(ceilings)
        # A topic subscribed once without a ceiling has none.
        self.ceilings = {t: max(c) for t, c in ceilings.items() if None not in c}
        self._guard = threading.Lock()
        self._event = threading.Event()
        self._future: asyncio.Future | None = None

    @property
    def woken(self) -> bool:
        return self._event.is_set()

    def receives(self, published: str) -> bool:
        """Whether a publication of ``published`` (one of ``keys``, unmarked) wakes it."""
        topic, _, number = published.partition(NUMBER)
        ceiling = self.ceilings.get(topic)
        return ceiling is None or not number.isdigit() or int(number) <= ceiling

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

    Publications carrying ``mark`` (``"topic#mark"``) do not wake it; a topic
    with a ceiling (``"topic@n"``) is woken by publications numbered n at most.
    """
    subscription = Subscription(topics, mark)
    with _subscriptions_guard:
        for topic in subscription.keys:
            _subscriptions.setdefault(topic, set()).add(subscription)
    return subscription


def unsubscribe(subscription: Subscription) -> None:
    with _subscriptions_guard:
        for topic in subscription.keys:
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

    A marked topic (``"topic#mark"``) spares the subscriptions of its mark; a
    numbered one (``"topic@n"``) those whose ceiling is below n.
    """
    topics = set(topics)
    with _subscriptions_guard:
        if WAKE_ALL in topics:
            woken = {s for waiting in _subscriptions.values() for s in waiting}
        else:
            woken = set()
            for marked in topics:
                published, _, mark = marked.partition(MARK)
                topic = published.partition(NUMBER)[0]
                woken.update(
                    s
                    for s in _subscriptions.get(topic, ())
                    if (not mark or s.mark != mark) and s.receives(published)
                )
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
    connection = connections[using]
    if connection.vendor == "postgresql":
        # Every process listens on the channel, this host's included.
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, " ".join(topics)])
        transaction.on_commit(lambda: deliver(topics), using=using)
    else:
        transaction.on_commit(lambda: _after_commit(topics), using=using)


def _after_commit(topics: list[str]) -> None:
    deliver(topics)
    _send_to_host(topics)


def published_by_query(topics: Iterable[str], *, using: str = DEFAULT_DB_ALIAS) -> None:
    """``publish`` for topics a query of the transaction carried (``NotifyEach``).

    On PostgreSQL that query has sent them to every host already: only this
    process is left to wake. Elsewhere it sent nothing, and this is ``publish``.
    """
    topics = sorted(set(topics))
    if not topics:
        return
    if connections[using].vendor == "postgresql":
        transaction.on_commit(lambda: deliver(topics), using=using)
    else:
        transaction.on_commit(lambda: _after_commit(topics), using=using)


class NotifyEach(Func):
    """In a query's columns: publish ``prefix`` + ``column`` for each row it reads.

    On PostgreSQL a ``pg_notify`` per row, which PostgreSQL sends at the commit
    of the query's transaction and merges when identical, so a read that a
    hot path runs anyway carries the publication to every host, and no
    statement is added for it. Elsewhere the column is NULL. Either way the
    caller then passes the same topics to ``published_by_query``.
    """

    output_field = BooleanField(null=True)

    def __init__(self, prefix: str, column: str) -> None:
        super().__init__(Value(CHANNEL), Value(prefix), column)

    def as_sql(self, compiler, connection, **extra):
        return "NULL", []

    def as_postgresql(self, compiler, connection, **extra):
        channel, prefix, column = (compiler.compile(e) for e in self.get_source_expressions())
        # A row without a value publishes nothing (CASE decides before it calls).
        sql = (
            f"CASE WHEN {column[0]} IS NULL THEN NULL "
            f"ELSE pg_notify({channel[0]}, {prefix[0]} || {column[0]}::text) IS NULL END"
        )
        return sql, [*column[1], *channel[1], *prefix[1], *column[1]]


# --- between the processes of one host ------------------------------------------------------


def wake_dir() -> Path:
    return Path(settings.VAR_DIR) / "wake"


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
        try:
            addresses = {e.path for e in os.scandir(wake_dir()) if e.name.endswith(".sock")}
        except FileNotFoundError:
            return
        addresses.discard(_own_address)  # delivered in-process already
        held = 0
        with self._guard:
            for address in self._peers.keys() - addresses:
                self._forget(self._peers[address])
            for address in addresses:
                peer = self._peers.get(address) or self._connect(address)
                if peer is None:
                    continue
                if peer.owed:
                    # Behind what it is owed already, and sent with it.
                    peer.owe(topics)
                elif not self._send(peer, topics):
                    peer.owe(topics)
                    held += 1
            if held:
                self._start_payer()
        if held:
            metrics.WAKE_HELD.inc(held)

    def _connect(self, address: str) -> _Peer | None:
        try:
            peer = _Peer(address)
        except ConnectionRefusedError:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(address)  # its process is gone
            return None
        except OSError:
            return None  # removed since the scan
        self._peers[address] = peer
        return peer

    def _forget(self, peer: _Peer, *, unlink: bool = False) -> None:
        del self._peers[peer.address]
        peer.sock.close()
        if unlink:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(peer.address)

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


_host: _HostSender | None = None
_host_guard = threading.Lock()


def _send_to_host(topics: Collection[str]) -> None:
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
    for key, value in {**KEEPALIVES, "application_name": APPLICATION_NAME}.items():
        params.setdefault(key, value)
    return params


async def _listen_postgres(using: str) -> None:
    """Hold one LISTEN connection, forever; after any loss, reconnect and wake everyone."""
    import psycopg

    while True:
        try:
            conn = await psycopg.AsyncConnection.connect(**_listen_params(using))
            try:
                await _listen(conn)
            finally:
                await conn.close()  # not ``async with``: no rollback tried on a dead connection
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.warning("wake-ups: LISTEN connection lost; reconnecting", exc_info=True)
        await asyncio.sleep(RECONNECT_DELAY)


async def _listen(conn: psycopg.AsyncConnection) -> None:
    await conn.execute(f"LISTEN {CHANNEL}")
    metrics.WAKE_LISTEN_HEARD.set_to_current_time()
    deliver([WAKE_ALL])  # anything published while we were not listening
    while True:
        async for notify in conn.notifies(timeout=CHECK_INTERVAL):
            metrics.WAKE_LISTEN_HEARD.set_to_current_time()
            deliver(notify.payload.split(" "))
        # Notifications that come during the check wait for the next notifies().
        await _check(conn)
        metrics.WAKE_LISTEN_HEARD.set_to_current_time()


class Unanswered(Exception):
    """The LISTEN connection did not answer its periodic check in time."""


async def _check(conn: psycopg.AsyncConnection) -> None:
    """Raise unless ``conn`` answers a query within ``CHECK_TIMEOUT`` seconds.

    A connection that does not answer is hung up under its query (``shutdown``:
    psycopg still owns the descriptor), so the query fails at once. Cancelling
    the query instead would have psycopg ask the server to cancel it and wait
    for that, for seconds more.
    """
    query = asyncio.ensure_future(conn.execute("SELECT 1"))
    try:
        done, _ = await asyncio.wait({query}, timeout=CHECK_TIMEOUT)
    finally:
        if not query.done():  # unanswered, or the listener is stopping
            with socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock:
                sock.shutdown(socket.SHUT_RDWR)
            query.add_done_callback(lambda task: task.cancelled() or task.exception())
    if done:
        query.result()
        return
    # Its failure, now quick, comes before the connection is closed under it.
    await asyncio.wait({query}, timeout=CHECK_TIMEOUT)
    raise Unanswered(f"no answer to a check within {CHECK_TIMEOUT:g} s: hung up")


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
