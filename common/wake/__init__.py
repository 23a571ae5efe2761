"""Wake-ups: a commit names the topics it concerns, and whoever waits on one of them wakes.

A topic is a short string a service makes up (``"n:7"``: notes for name 7,
``"r:5"``: events of room 5). A waiter *subscribes* to its topics before it
looks at the database, then waits; a writer *publishes* its topics when its
transaction commits. Subscribing first means a commit between the look and
the wait is never missed: it wakes the subscription, and the wait returns at
once.

Where a publication reaches, and what it costs while nothing happens (nothing):

* **This process** (``topics.py``): subscriptions live in a dictionary of
  topics. A thread waits on an ``Event``; a coroutine of the server's event
  loop on a future (``Subscription.wait_async``), so a waiting request holds
  no thread.
* **The other processes of this host** (SQLite, ``host.py``): each server
  process that listens (``listen``, from the ASGI lifespan) binds a Unix
  datagram socket in ``VAR_DIR/wake/``; at commit each publication goes to
  every socket there, one datagram each. The kernel holds it until the
  listener's event loop reads it.
* **Every process of every host** (PostgreSQL, ``postgres.py``): the
  transaction runs ``NOTIFY plumb_wake``, which PostgreSQL delivers at
  commit, and only then, to every listening connection: one per server
  process (``listen``). A sparse kind's topics go out on a channel of their
  own, heard only by the processes waiting on that kind.

A publication may carry its publisher's *mark* (``"p:7#ab12"``), which spares
the subscriptions made with the same mark, and a *number* (``"w:3@812"``),
which spares those whose ceiling is below it; ``topics.py`` says what each
is for.

**No wake-up is lost** (SPEC §3.3): whatever the burst of commits, each
publication reaches every listener that existed when it was sent. How, and
what can still delay or lose one, is told beside each transport: between the
processes of a host in ``host.py`` (what a full queue refuses is held, never
dropped), between hosts in ``postgres.py`` (a listener whose connection dies,
loudly or silently, connects again and wakes everything it serves).

This module is the interface the rest of plumb uses: subscribing,
publishing, listening, and parking a waiting call on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.models import BooleanField, Func, Value

from common.wake import host, postgres
from common.wake.host import wake_dir
from common.wake.postgres import CHANNEL
from common.wake.topics import (
    MARK,
    NUMBER,
    WAKE_ALL,
    Subscription,
    deliver,
    sparse,
    subscribe,
    subscribed,
    subscriptions,
    unsubscribe,
)

__all__ = [
    "CHANNEL",
    "MARK",
    "NUMBER",
    "WAKE_ALL",
    "Carrier",
    "Listening",
    "NotifyEach",
    "Parked",
    "Resumed",
    "Subscription",
    "deliver",
    "listen",
    "may_park",
    "parking",
    "publish",
    "publish_with",
    "published_by_query",
    "resumed",
    "resuming",
    "sparse",
    "subscribe",
    "subscribed",
    "subscriptions",
    "unsubscribe",
    "wake_dir",
]


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


def resuming() -> bool:
    """Whether this request resumes a parked call (a look that leaves it for ``resumed``)."""
    return getattr(_parking, "resumed", None) is not None


def resumed() -> Resumed | None:
    """The parked call this request resumes, once: a second wait in it starts afresh."""
    state = getattr(_parking, "resumed", None)
    _parking.resumed = None
    return state


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
        # Every process listens on CHANNEL, this host's included; on a sparse
        # kind's channel, those waiting on that kind (postgres.py).
        notices = [(channel, " ".join(each)) for channel, each in postgres.channels(topics).items()]
        carrier = getattr(_carrier, "writes", None)
        if carrier is not None:
            # publish_with: the NOTIFY rides in the statement of the writes.
            for notice in notices:
                carrier.select("pg_notify(%s, %s) IS NULL", list(notice))
        else:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT " + ", ".join(["pg_notify(%s, %s)"] * len(notices)),
                    [part for notice in notices for part in notice],
                )
        transaction.on_commit(lambda: deliver(topics), using=using)
    else:
        transaction.on_commit(lambda: _after_commit(topics), using=using)


def _after_commit(topics: list[str]) -> None:
    deliver(topics)
    host.send(topics)


class Carrier(Protocol):
    """Writes sent as one statement (``common.prepared.Writes``), which may carry a NOTIFY."""

    together: bool  # sent as one statement (PostgreSQL)
    using: str

    def select(self, sql: str, params: Sequence[Any] = ()) -> None: ...


def publish_with(writes: Carrier, topics: Iterable[str]) -> None:
    """``publish``, its NOTIFY carried by the statement of ``writes`` (PostgreSQL).

    ``writes`` sends its INSERTs and UPDATEs as one statement there: the
    NOTIFY rides in its SELECT rather than costing a statement (and a round
    trip) of its own. It is sent at the commit, as ``publish``'s is.
    """
    # Through publish all the same: every publication takes that one way (the
    # tests replace it to play a commit made by another process).
    _carrier.writes = writes if writes.together else None
    try:
        if writes.using == DEFAULT_DB_ALIAS:
            publish(topics)
        else:
            publish(topics, using=writes.using)
    finally:
        _carrier.writes = None


# The writes that carry this thread's publication, while publish_with runs.
_carrier = threading.local()


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
        super().__init__(Value(postgres.channel_of(prefix)), Value(prefix), column)

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


# --- listening ----------------------------------------------------------------------------


class Listening:
    """What ``listen`` started in a process; ``close`` stops it."""

    def __init__(
        self, host_listener: host.Listener | None, postgres_listener: asyncio.Task | None
    ) -> None:
        self.host_listener = host_listener
        self.postgres_listener = postgres_listener

    async def close(self) -> None:
        if self.host_listener is not None:
            self.host_listener.close()
        if self.postgres_listener is not None:
            self.postgres_listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.postgres_listener


def listen(*, using: str = DEFAULT_DB_ALIAS) -> Listening:
    """Receive other processes' (and, on PostgreSQL, other hosts') publications on this loop."""
    loop = asyncio.get_running_loop()
    if connections[using].vendor == "postgresql":
        return Listening(None, loop.create_task(postgres.listen_forever(using)))
    return Listening(host.Listener(loop), None)
