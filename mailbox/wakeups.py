"""Long-polling calls: one waiting rule for all of them, and keep them few.

Four calls may wait: ``check_messages`` (a note), ``read_messages`` (a room
event), ``wait_for_activity`` (either) and ``list_sent_notes`` (one of the
caller's notes delivered or bounced). Each passes :func:`wait_for` a
*check*, a callable that returns the call's answer or None while there is
nothing to answer, and the *topics* of what it waits for; everything else is
decided here, once. ``mailbox`` never imports ``rooms``: the room waits build
their checks and topics in ``rooms`` and hand them in.

A waiter subscribes to its topics (``common/wake/``), runs its check, and
sleeps until a commit publishes one of them: a note publishes its
recipient's topics (:func:`note_topics`), a room event its room's. That
commit may come from this process, another process of the host, or (on
PostgreSQL) another host; the waiter runs its check again only then, so
while nothing happens it makes no query at all. It steps out of its
process's request gate while it sleeps, and holds no transaction.

Under plumb's server a waiting call *parks*: it holds no thread while it
sleeps (``common.wake.Parked``, ``plumb_site/asgi.py``), up to
``PLUMB_PARKED_POLLS`` per process. Past that, and under any other server,
it sleeps in its thread. Either way waiting is rationed, across the three
calls alike:

* **Up to four waiting calls per session** (``WAITS_PER_SESSION``; any of
  the three, so an MCP client and a hook of one session wait side by side
  instead of cutting each other off). Each records its ticket among the
  session's newest (``Session.poll_tickets``); a fifth pushes the oldest out
  and publishes the session's poll topic, and the oldest, woken, finds its
  ticket gone and answers at once with what it has (its *idle* answer: no
  notes, no events), in whatever process or host it waits. A note still
  goes to one of them only: each check claims what it delivers.
* **A waiting call ends with its rights.** Ending a session (by its agent,
  an operator, or the revocation of its key) publishes its poll topic; a
  waiting call, woken, is refused as a new call with its token would be
  (``401 session_ended`` / ``key_revoked``). A parked call is refused by
  its request's own authentication when it runs again; a room wait, by its
  membership check.
* **At most ``PLUMB_WAITING_POLLS`` calls waiting in threads per process**
  (half its threads by default). Past it a call answers at once, as if it
  had not asked to wait, rather than take a thread other calls need.
"""

from __future__ import annotations

import functools
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from common import metrics, wake
from common.gate import gate
from common.pause import pause_point
from mailbox.errors import session_ended_refusal
from mailbox.models import Session

if TYPE_CHECKING:
    from mailbox.models import Note

T = TypeVar("T")

_guard = threading.Lock()
_waiting = 0

# How many waiting calls of one session wait side by side (SPEC §3.3).
WAITS_PER_SESSION = 4


def session_topics(session: Session) -> list[str]:
    """What a note for ``session`` publishes: bound to it, for its name, or "next" here.

    A "next" note is for the sessions whose watermark is at least its id
    (SPEC §3.4), and wakes only those (``wake.NUMBER``): one sent after a
    session started is not for it, except on PostgreSQL when a note with a
    lower id commits after one with a higher id, which the session's
    watermark already counts.
    """
    return [
        f"s:{session.pk}",
        f"n:{session.name_id}",
        f"w:{session.workspace_id}{wake.NUMBER}{session.notes_watermark}",
    ]


def note_topics(note: Note) -> list[str]:
    if note.bound_session_id is not None:
        return [f"s:{note.bound_session_id}"]
    if note.recipient_id is not None:
        return [f"n:{note.recipient_id}"]
    return [f"w:{note.next_workspace_id}{wake.NUMBER}{note.pk}"]


# What a note of name N publishes when it stops waiting (delivered or bounced):
# "t:N", for the name's waiting list_sent_notes calls. Sparse: every pickup
# publishes one, and few wait on it, so it reaches only the processes that
# hold such a call (common/wake/topics.py).
SENT_PREFIX = "t:"
wake.sparse(SENT_PREFIX)


def sent_topic(name_id: int) -> str:
    return f"{SENT_PREFIX}{name_id}"


def _poll_topic(session_id: int) -> str:
    return f"p:{session_id}"


def poll_enter() -> bool:
    """Take one of the process's waiting places; False if all are taken."""
    global _waiting
    with _guard:
        if _waiting >= settings.PLUMB_WAITING_POLLS:
            return False
        _waiting += 1
        return True


def poll_leave() -> None:
    global _waiting
    with _guard:
        _waiting -= 1


def waiting_polls() -> int:
    with _guard:
        return _waiting


def wait_for(
    session: Session,
    check: Callable[..., T | None],
    *,
    seconds: float,
    idle: Callable[[], T],
    topics: Iterable[str],
    since: Callable[[], object] | None = None,
    look_first: bool = False,
) -> T:
    """The first answer ``check`` gives within ``seconds``, or ``idle()``.

    ``check`` runs at once, and again each time a commit publishes one of
    ``topics``, until it answers (not None) or the time is up. ``idle`` makes
    the answer of a call that found nothing: timed out, or superseded by a
    newer waiting call of the session. Writes the session's ticket when it
    waits; takes no lock and holds no transaction while it sleeps.

    A call that waits for a change, rather than for something to exist,
    passes ``since``: what it saw when it began, taken once, and handed to
    every ``check`` of the call (``check(seen)``), parked runs included.

    A call whose ``check`` claims nothing (a room read: what it answers is
    also there for the session's other calls) passes ``look_first``: woken,
    it looks before it subscribes again or asks whether newer calls pushed
    it out, and does either only when the look finds nothing (then it looks
    once more, subscribed, before it parks). A call pushed out answers at
    once with what it has, so one that has an answer gives it either way;
    one message that wakes 1,000 such calls then costs them one query and
    one subscription less each.

    Under plumb's server the call *parks* (``common.wake.Parked``): its thread
    goes back to the pool while the event loop waits, and the request runs
    again when woken, arriving here with ``wake.resumed()``. Elsewhere (the
    test client, a plain WSGI server) it sleeps in its thread, and without a
    free waiting place in this process ``check`` runs once.
    """
    resumed = wake.resumed()
    seen = _NOTHING_SEEN
    if since is not None:
        seen = _seen_before(resumed)
        if seen is _NOTHING_SEEN:
            seen = since()
        check = functools.partial(check, seen)
    if resumed is not None:
        deadline, ticket = resumed.deadline, resumed.ticket
        if not resumed.woken:
            # The wait ran its time: one last look and the answer, with no
            # subscription after it. The authentication of this very request
            # said whether notes are pending, which is as fresh as the look
            # (nearly always "no": then the look at notes costs no query).
            return _answer(check, idle)
        if look_first:
            # Before subscribing: a look that finds its answer (each of the
            # 1,000 reads one message woke) needs no subscription at all. One
            # that finds nothing subscribes below and looks again before it
            # parks, so a commit between the two looks still wakes it.
            answer = check()
            if answer is not None:
                return answer
            pause_point("poll.looked")  # found nothing, not subscribed yet
        # Subscribed before the ticket is read: a newer call that records its
        # own after that read wakes this subscription.
        subscription = _subscribe(session, topics, ticket)
        if not look_first:
            # Its check may be the claim itself, which the hint must not skip. A
            # call that looks first claims nothing: its answer's notes go by the
            # hint of this very run's authentication, as any call's do.
            session.notes_maybe_pending = True
        try:
            superseded = _superseded(session, ticket)
        except BaseException:
            wake.unsubscribe(subscription)
            raise
        if superseded:
            wake.unsubscribe(subscription)
            return idle()
        return _park_or_answer(subscription, check, idle, deadline, ticket, seen)
    if seconds <= 0:
        return _answer(check, idle)
    deadline = time.monotonic() + seconds
    # The authentication hint about pending notes predates the subscription
    # below (and goes stale while the call waits): a note committed meanwhile
    # would wake no one and ride on no reply, so look.
    session.notes_maybe_pending = True
    ticket = secrets.token_hex(8)
    # Subscribed before the ticket is recorded: a newer call of the session
    # records its ticket after this one's and then announces it, and this
    # subscription hears that announcement however close the two calls are.
    subscription = _subscribe(session, topics, ticket)
    try:
        # Recorded first, so that the oldest call steps aside even when this
        # one cannot wait: the newest calls are the ones the agent listens to.
        pushed_out = _record(session, ticket, seconds)
        pause_point("poll.recorded")
        if pushed_out:
            # Marked with the ticket: this call is not woken by its own
            # announcement (PostgreSQL's LISTEN includes this process).
            wake.publish([f"{_poll_topic(session.pk)}{wake.MARK}{ticket}"])
    except BaseException:
        wake.unsubscribe(subscription)
        raise
    if wake.may_park():
        return _park_or_answer(subscription, check, idle, deadline, ticket, seen)
    if not poll_enter():
        wake.unsubscribe(subscription)
        return _answer(check, idle)
    return _wait_in_thread(session, subscription, check, idle, deadline, ticket)


def _subscribe(session: Session, topics: Iterable[str], ticket: str) -> wake.Subscription:
    return wake.subscribe([*topics, _poll_topic(session.pk)], mark=ticket)


def _park_or_answer(subscription, check, idle, deadline: float, ticket: str, seen: object):
    """Answer now if there is an answer or no time left; otherwise park on ``subscription``."""
    try:
        answer = check()
    except BaseException:
        wake.unsubscribe(subscription)
        raise
    if answer is not None:
        wake.unsubscribe(subscription)
        return answer
    return _park(subscription, idle, deadline, ticket, seen)


def _park(subscription, idle, deadline: float, ticket: str, seen: object):
    """Park on ``subscription`` (nothing to answer yet), or answer ``idle()`` past the deadline."""
    if deadline <= time.monotonic():
        wake.unsubscribe(subscription)
        return idle()
    if seen is not _NOTHING_SEEN:
        _keep_seen(ticket, deadline, seen)
    # The front waits on the subscription, and unsubscribes it.
    raise wake.Parked(subscription, deadline, ticket)


# What parked calls that passed ``since`` saw when they began, by ticket, until
# they run again. A parked call runs again in the process that parked it.
_NOTHING_SEEN = object()
_seen: dict[str, tuple[float, object]] = {}
_seen_guard = threading.Lock()
# How long past its deadline an entry is kept: its call may still be about to run.
_SEEN_GRACE = 60.0


def _keep_seen(ticket: str, deadline: float, seen: object) -> None:
    now = time.monotonic()
    with _seen_guard:
        # Calls whose client left never run again: their entries go here.
        for stale in [t for t, (d, _) in _seen.items() if d + _SEEN_GRACE < now]:
            del _seen[stale]
        _seen[ticket] = (deadline, seen)


def _seen_before(resumed: wake.Resumed | None) -> object:
    if resumed is None:
        return _NOTHING_SEEN
    with _seen_guard:
        kept = _seen.pop(resumed.ticket, None)
    return _NOTHING_SEEN if kept is None else kept[1]


def _wait_in_thread(session, subscription, check, idle, deadline: float, ticket: str):
    topics = subscription.topics
    waiting = False  # counted in plumb_polls_waiting from the first sleep to the answer
    try:
        while True:
            # Subscribed before the check: a commit between the two wakes the wait.
            answer = check()
            if answer is not None:
                return answer
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if not waiting:
                waiting = True
                metrics.POLLS_WAITING.inc()
                # Its first look found nothing: from here a commit must wake it.
                pause_point("poll.asleep")
            with gate().stepped_aside():
                woken = subscription.wait(remaining)
            # The next subscription starts before the ticket is read again.
            wake.unsubscribe(subscription)
            subscription = wake.subscribe(topics, mark=ticket)
            if woken and _superseded(session, ticket):
                break
    finally:
        wake.unsubscribe(subscription)
        poll_leave()
        if waiting:
            metrics.POLLS_WAITING.dec()
    return idle()


def _answer(check: Callable[[], T | None], idle: Callable[[], T]) -> T:
    answer = check()
    return idle() if answer is None else answer


def _record(session: Session, ticket: str, seconds: float) -> bool:
    """Add ``ticket`` to the session's newest waiting calls; whether it pushed one out.

    Each entry is ``ticket/expiry`` (Unix seconds): a call past its expiry has
    answered, so it holds no place. A compare-and-set on the column: two calls
    recording at once both read the same list, one UPDATE matches it, and the
    other (on PostgreSQL after waiting for the row, then finding it changed)
    reads again and adds its ticket to the new list.
    """
    expiry = int(timezone.now().timestamp() + seconds) + 1
    while True:
        current = (
            Session.objects.filter(pk=session.pk).values_list("poll_tickets", flat=True).first()
        )
        if current is None:
            return False  # the session's row is gone: its name was freed
        now = timezone.now().timestamp()
        live = [entry for entry in current.split() if int(entry.partition("/")[2]) >= now]
        kept = [*live, f"{ticket}/{expiry}"]
        recorded = " ".join(kept[-WAITS_PER_SESSION:])
        if Session.objects.filter(pk=session.pk, poll_tickets=current).update(
            poll_tickets=recorded
        ):
            return len(kept) > WAITS_PER_SESSION


def _superseded(session: Session, ticket: str) -> bool:
    """Whether the call has lost its place, or its session has ended (then refused).

    Four newer waiting calls of the session pushed its ticket out, here or in
    another process. Only the row knows: which calls recorded their tickets
    last is not the order in which they took their places in this process.
    Raises the refusal a new call would get when the session has ended.
    """
    row = (
        Session.objects.filter(pk=session.pk)
        .values_list("poll_tickets", "ended_at", "end_reason")
        .first()
    )
    if row is None:
        raise session_ended_refusal("")
    tickets, ended_at, end_reason = row
    if ended_at is not None:
        raise session_ended_refusal(end_reason)
    return f"{ticket}/" not in tickets


def session_waits_end(session_ids: Iterable[int]) -> None:
    """Wake the waiting calls of sessions that just ended, once that commits."""
    topics = [_poll_topic(pk) for pk in session_ids]
    if topics:
        transaction.on_commit(lambda: wake.publish(topics))
