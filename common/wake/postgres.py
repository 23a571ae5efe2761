"""Wake-ups between hosts: PostgreSQL's LISTEN/NOTIFY.

A publishing transaction runs ``NOTIFY plumb_wake`` (``CHANNEL``), which
PostgreSQL delivers at commit, and only then, to every listening connection:
one per server process (``listen_forever``, from ``listen`` in the ASGI
lifespan), this host's included.

**Sparse kinds** (``topics.sparse``: every room send, every pickup of a
note, which few processes wait on at a time) go out on a channel of their
own (``channel_of``), which a process listens on only while it waits on
that kind, and ``LINGER`` seconds after its last such waiter, so that a
waiter that waits again at once does not make it LISTEN anew. A process
that waits on none of them is not woken by them, nor is PostgreSQL's
backend of its connection made to send them: each process of each host
hears the room sends only while it serves a call waiting on a room.
The first waiter of a kind subscribes, looks, and waits, while its process
sends the LISTEN; once PostgreSQL has answered it, every subscription of the
kind is woken to look again (``topics.deliver_kind``), which finds whatever
was committed before the LISTEN took effect. Every process must run the same
code: one that publishes a kind on its own channel is not heard by one that
listens for it on ``CHANNEL`` only.

**No wake-up is lost** (SPEC §3.3). PostgreSQL queues each NOTIFY for every
listening connection (up to 8 GB) and drops none. A listener that loses its
connection connects again, listens on every kind its process waits on, and
wakes everything it serves: it may have
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
import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from django.db import connections

from common import metrics
from common.pause import pause_point
from common.wake import topics as _topics
from common.wake.topics import WAKE_ALL, deliver

if TYPE_CHECKING:
    import psycopg

# One logger for the package, whichever module writes: its records carry one name to match.
logger = logging.getLogger("common.wake")

CHANNEL = "plumb_wake"
RECONNECT_DELAY = 1.0  # seconds before a lost LISTEN connection is opened again
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
LINGER = 30.0  # seconds a process keeps listening on a sparse kind after its last waiter


def channel_of(topic: str) -> str:
    """The channel a publication of ``topic`` (or of a sparse kind's prefix) goes out on."""
    kind = _topics.sparse_kind(topic)
    return CHANNEL if kind is None else f"{CHANNEL}/{kind}"


def channels(topics: Iterable[str]) -> dict[str, list[str]]:
    """``topics`` by the channel each goes out on."""
    out: dict[str, list[str]] = {}
    for topic in topics:
        out.setdefault(channel_of(topic), []).append(topic)
    return out


class _Kinds:
    """The sparse kinds this process waits on, as ``topics.announcing`` reports them.

    Written from any thread; the LISTEN connection follows it on ``loop``
    (``_follow``), nudged by ``changed``.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.guard = threading.Lock()
        self.wanted: set[str] = set()
        self.released: dict[str, float] = {}  # kind: when its last waiter let go (monotonic)
        self.loop = loop
        self.changed = asyncio.Event()

    def announce(self, kind: str, held: bool) -> None:
        with self.guard:
            if held:
                self.wanted.add(kind)
                self.released.pop(kind, None)
            else:
                self.wanted.discard(kind)
                self.released[kind] = time.monotonic()
        # A loop closed under a stopping worker listens to nothing any more.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.changed.set)

    def now_wanted(self) -> tuple[set[str], set[str]]:
        """(the kinds waited on, those let go at least ``LINGER`` seconds ago)."""
        horizon = time.monotonic() - LINGER
        with self.guard:
            return set(self.wanted), {k for k, t in self.released.items() if t <= horizon}


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


async def listen_forever(using: str) -> None:
    """Hold one LISTEN connection, forever; after any loss, reconnect and wake everyone."""
    import psycopg

    kinds = _Kinds(asyncio.get_running_loop())
    # Called at once for each kind waited on now, then at each first and last waiter.
    _topics.announcing(kinds.announce)
    try:
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(**_listen_params(using))
                try:
                    await _listen(conn, kinds)
                finally:
                    await conn.close()  # not ``async with``: no rollback tried on a dead connection
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.warning("wake-ups: LISTEN connection lost; reconnecting", exc_info=True)
            await asyncio.sleep(RECONNECT_DELAY)
    finally:
        _topics.announcing(None)


async def _listen(conn: psycopg.AsyncConnection, kinds: _Kinds) -> None:
    # Whatever operation reads a notification (the wait below, or a query:
    # LISTEN, a check) hands it to psycopg's handler, and so to this one.
    conn.add_notify_handler(_heard)
    await conn.execute(f"LISTEN {CHANNEL}")
    listening: set[str] = set()
    await _follow(conn, kinds, listening)
    metrics.WAKE_LISTEN_HEARD.set_to_current_time()
    deliver([WAKE_ALL])  # anything published while we were not listening
    next_check = time.monotonic() + CHECK_INTERVAL
    while True:
        await _hear(conn, next_check - time.monotonic(), kinds.changed)
        await _follow(conn, kinds, listening)
        if time.monotonic() >= next_check:
            await _check(conn)
            metrics.WAKE_LISTEN_HEARD.set_to_current_time()
            next_check = time.monotonic() + CHECK_INTERVAL


async def _follow(conn: psycopg.AsyncConnection, kinds: _Kinds, listening: set[str]) -> None:
    """LISTEN on the sparse kinds waited on, UNLISTEN those let go ``LINGER`` seconds ago."""
    from psycopg import sql

    kinds.changed.clear()  # before reading: a change made after it nudges again
    wanted, stale = kinds.now_wanted()
    for kind in sorted(wanted - listening):
        pause_point("wake.kind_listen")
        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel_of(kind))))
        listening.add(kind)
        # Its waiters may have looked before the LISTEN took effect: they look again.
        _topics.deliver_kind(kind)
    for kind in sorted((listening - wanted) & stale):
        await conn.execute(sql.SQL("UNLISTEN {}").format(sql.Identifier(channel_of(kind))))
        listening.discard(kind)


def _heard(notify: psycopg.Notify) -> None:
    metrics.WAKE_LISTEN_HEARD.set_to_current_time()
    deliver(notify.payload.split(" "))


async def _hear(conn: psycopg.AsyncConnection, seconds: float, changed: asyncio.Event) -> None:
    """Deliver the notifications ``conn`` receives for ``seconds``; raise if it fails meanwhile.

    Returns early once ``changed`` is set: the kinds to listen on changed.

    The event loop watches the socket for as long, and a notification costs
    one callback that reads it: psycopg's ``notifies()`` would watch it anew,
    with a future and a timer, for each batch it reads, and wake ten times a
    second besides. No query runs on ``conn`` meanwhile (the check comes
    after), so nothing else reads its socket. Reading first takes what a
    query's reading left in libpq's buffer, and a failed read ends the
    connection (the listener connects again and wakes everything), as an
    exception in the handler does.
    """
    loop = asyncio.get_running_loop()
    pgconn = conn.pgconn
    fileno = pgconn.socket
    failed = loop.create_future()

    def readable() -> None:
        try:
            pgconn.consume_input()
            while notify := pgconn.notifies():
                pgconn.notify_handler(notify)
        except Exception as exc:
            loop.remove_reader(fileno)
            if not failed.done():
                failed.set_exception(exc)

    loop.add_reader(fileno, readable)
    nudged = asyncio.ensure_future(changed.wait())
    try:
        readable()
        await asyncio.wait(
            {failed, nudged}, timeout=max(seconds, 0), return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        loop.remove_reader(fileno)
        nudged.cancel()
    if failed.done():
        failed.result()


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
