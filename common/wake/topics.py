"""Topics, and this process's subscriptions to them.

Subscriptions live in a dictionary of topics. A thread waits on an ``Event``;
a coroutine of the server's event loop on a future
(``Subscription.wait_async``), so a waiting request holds no thread.
``deliver`` wakes them, whichever transport brought the publication: this
process's own commit, another process of the host (``host.py``), or
PostgreSQL (``postgres.py``).

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

A topic may be *sparse* (``sparse``): at most moments few processes wait
on its kind, and it is published often (every pickup of a note tells its
sender's waiting ``list_sent_notes``, every room send its room's readers).
A process counts its subscriptions to each sparse kind and announces the
first and the last (``announcing``), so that the other processes of its
host send it those publications only while it waits on one (``host.py``),
and PostgreSQL only while it listens on that kind's channel
(``postgres.py``).
It announces before the subscription is made, so before the waiter's first
look: a commit whose publication missed the announcement is one that look
already sees. On PostgreSQL the announcement is a LISTEN, answered after the
look may have run; once it is, the listener wakes the kind's subscriptions
(``deliver_kind``) to look again.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator

WAKE_ALL = "*"  # a listener that may have missed publications wakes every subscription
MARK = "#"  # "topic#mark": wakes the topic's subscriptions but those of that mark
NUMBER = "@"  # "topic@n": published, a thing numbered n; subscribed, things numbered n at most


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
        self.sparse = frozenset(p for p in map(sparse_kind, self.keys) if p is not None)
        self.subscribed = False  # between subscribe and unsubscribe
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


_subscriptions: dict[str, set[Subscription]] = {}
_subscriptions_guard = threading.Lock()


def subscribe(topics: Iterable[str], *, mark: str | None = None) -> Subscription:
    """Start collecting wake-ups for ``topics``; ``unsubscribe`` it when done.

    Publications carrying ``mark`` (``"topic#mark"``) do not wake it; a topic
    with a ceiling (``"topic@n"``) is woken by publications numbered n at most.
    """
    subscription = Subscription(topics, mark)
    # Announced before it is added (see the module's docstring), and counted
    # only once announced: an announcement that fails leaves no count behind.
    with _held_guard if subscription.sparse else contextlib.nullcontext():
        for kind in subscription.sparse:
            if not _held.get(kind):
                _announce(kind, True)
            _held[kind] = _held.get(kind, 0) + 1
        _add(subscription)
    return subscription


def _add(subscription: Subscription) -> None:
    with _subscriptions_guard:
        for topic in subscription.keys:
            _subscriptions.setdefault(topic, set()).add(subscription)
        subscription.subscribed = True


def unsubscribe(subscription: Subscription) -> None:
    with _subscriptions_guard:
        if not subscription.subscribed:
            return  # unsubscribed already
        subscription.subscribed = False
        for topic in subscription.keys:
            waiting = _subscriptions.get(topic)
            if waiting is not None:
                waiting.discard(subscription)
                if not waiting:
                    del _subscriptions[topic]
    if subscription.sparse:
        with _held_guard:
            for kind in subscription.sparse:
                _held[kind] -= 1
                if not _held[kind]:
                    del _held[kind]
                    _announce(kind, False)


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


def deliver_kind(prefix: str) -> None:
    """Wake this process's subscriptions to any topic beginning with ``prefix``.

    For a transport that starts carrying a sparse kind only once a waiter
    announces it (``postgres.py``): a commit made before the transport
    carried it is one that the woken waiters see when they look again.
    """
    with _subscriptions_guard:
        woken = {
            s
            for topic, waiting in _subscriptions.items()
            if topic.startswith(prefix)
            for s in waiting
        }
    for subscription in woken:
        subscription.wake()


# --- sparse topics ------------------------------------------------------------------------

_sparse: set[str] = set()  # the prefixes of sparse topics ("t:")
_held: dict[str, int] = {}  # this process's subscriptions to each sparse kind
_held_guard = threading.Lock()  # taken before _subscriptions_guard, never after


def _announce_nothing(kind: str, held: bool) -> None:
    pass


_announce: Callable[[str, bool], None] = _announce_nothing


def sparse(prefix: str) -> None:
    """Make topics beginning with ``prefix`` sparse (see the module's docstring)."""
    _sparse.add(prefix)


def sparse_kind(topic: str) -> str | None:
    """The sparse prefix ``topic`` begins with, if any."""
    for prefix in _sparse:
        if topic.startswith(prefix):
            return prefix
    return None


def announcing(announce: Callable[[str, bool], None] | None) -> None:
    """Have ``announce(kind, held)`` called when this process starts (``held``) or stops
    waiting on a sparse kind, and at once for each it waits on now: the transport's
    listener starts (``None`` when it stops)."""
    global _announce
    with _held_guard:
        _announce = announce or _announce_nothing
        for kind in _held:
            _announce(kind, True)
