"""Long-polling calls: one waiting rule for all of them, and keep them few.

Three calls may wait: ``check_messages`` (a note), ``read_messages`` (a room
event) and ``wait_for_activity`` (either). Each passes :func:`wait_for` a
*check*, a callable that returns the call's answer or None while there is
nothing to answer, and everything else is decided here, once. ``mailbox``
never imports ``rooms``: the room waits build their checks in ``rooms`` and
hand them in.

Within one process a condition variable wakes waiters at once when a note or
a room event is committed (the services register :func:`notify_all` with
``transaction.on_commit``); each waiter then runs its check again. What
another process commits is found by the waiter's periodic re-check
(``POLL_INTERVAL``), so a waiter sees it within about half a second whatever
process stored it, at the cost of its check (one or two indexed queries) per
interval. A waiter steps out of its process's request gate while it sleeps,
so idle waiters never hold up requests with work to do. No transaction is
held while waiting.

Each waiting call still holds one of the process's threads, so waiting is
rationed, across the three calls alike:

* **One waiting call per session.** A newer waiting call of the same session
  (any of the three) makes the older one answer at once with what it has
  (its *idle* answer: no notes, no events): in this process through the
  condition variable, from another process at the older call's next
  re-check, which reads the session's newest ticket (``Session.poll_ticket``).
* **At most ``PLUMB_WAITING_POLLS`` waiting calls per process** (half its
  threads by default). Past it a call answers at once, as if it had not
  asked to wait, rather than take a thread other calls need.

The rest of issue 16 (LISTEN/NOTIFY across hosts, waiting without a thread)
replaces how waiters sleep and are woken, behind :func:`wait_for` and
:func:`notify_all`; the calls and their checks stay as they are.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from django.conf import settings

from common import metrics
from common.gate import gate
from mailbox.models import Session

POLL_INTERVAL = 0.5

T = TypeVar("T")

_condition = threading.Condition()
_generation = 0
# Session id -> ticket of its newest waiting poll in this process.
_newest: dict[int, str] = {}
_waiting = 0


def notify_all() -> None:
    global _generation
    with _condition:
        _generation += 1
        _condition.notify_all()


def current_generation() -> int:
    with _condition:
        return _generation


def wait(since_generation: int, timeout: float) -> None:
    """Block until a note or room event is committed in this process, or ``timeout`` passes."""
    with gate().stepped_aside(), _condition:
        if _generation == since_generation:
            _condition.wait(timeout)


def poll_enter(session_id: int, ticket: str) -> bool:
    """Take one of the process's waiting places for ``ticket``; False if all are taken.

    The session's older waiting call in this process, if any, is superseded and woken.
    """
    global _waiting, _generation
    with _condition:
        if _waiting >= settings.PLUMB_WAITING_POLLS:
            return False
        _waiting += 1
        if session_id in _newest:
            _generation += 1
            _condition.notify_all()
        _newest[session_id] = ticket
        return True


def poll_leave(session_id: int, ticket: str) -> None:
    global _waiting
    with _condition:
        _waiting -= 1
        if _newest.get(session_id) == ticket:
            del _newest[session_id]


def superseded_here(session_id: int, ticket: str) -> bool:
    """Whether a newer waiting call of the session has started in this process."""
    with _condition:
        return _newest.get(session_id, ticket) != ticket


def waiting_polls() -> int:
    with _condition:
        return _waiting


def wait_for(
    session: Session, check: Callable[[], T | None], *, seconds: float, idle: Callable[[], T]
) -> T:
    """The first answer ``check`` gives within ``seconds``, or ``idle()``.

    ``check`` runs at once, again whenever a note or room event is committed
    in this process, and every ``POLL_INTERVAL`` otherwise, until it answers
    (not None) or the time is up. ``idle`` makes the answer of a call that
    found nothing: timed out, or superseded by a newer waiting call of the
    session. Without ``seconds``, or without a free waiting place in this
    process, ``check`` runs once. Writes the session's ticket when it waits;
    takes no lock and holds no transaction while it sleeps.
    """
    if seconds <= 0:
        return _answer(check, idle)
    deadline = time.monotonic() + seconds
    # The authentication hint about pending notes predates the wake-up
    # generation read below (and goes stale while the call waits): a note
    # committed meanwhile would wake no one and ride on no reply, so look.
    session.notes_maybe_pending = True
    ticket = secrets.token_hex(8)
    # Recorded first, so that the older call steps aside even when this one
    # cannot wait: the newest call is the one the agent is listening to.
    Session.objects.filter(pk=session.pk).update(poll_ticket=ticket)
    if not poll_enter(session.pk, ticket):
        return _answer(check, idle)
    waiting = False  # counted in plumb_polls_waiting from the first sleep to the answer
    try:
        while True:
            generation = current_generation()
            answer = check()
            if answer is not None:
                return answer
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if not waiting:
                waiting = True
                metrics.POLLS_WAITING.inc()
            wait(generation, min(POLL_INTERVAL, remaining))
            if _superseded(session, ticket):
                break
    finally:
        poll_leave(session.pk, ticket)
        if waiting:
            metrics.POLLS_WAITING.dec()
    return idle()


def _answer(check: Callable[[], T | None], idle: Callable[[], T]) -> T:
    answer = check()
    return idle() if answer is None else answer


def _superseded(session: Session, ticket: str) -> bool:
    """A newer waiting call of the session started, here or in another process."""
    if superseded_here(session.pk, ticket):
        return True
    return not Session.objects.filter(pk=session.pk, poll_ticket=ticket).exists()
