"""Wake long-polling ``check_messages`` calls, and keep them few.

Within one server process a condition variable wakes waiters at once when a
note is committed. Notes sent through another process are found by the
waiter's periodic re-check (``POLL_INTERVAL``), so a poller sees a note
within about a second whatever process stored it, at the cost of one indexed
query per interval per waiter. A waiter steps out of its process's request
gate while it sleeps, so idle pollers never hold up requests with work to do.

Each waiting poll still holds one of the process's threads, so waiting is
rationed:

* **One waiting poll per session.** A newer poll of the same session makes
  the older one answer at once with what it has (no notes): in this process
  through the condition variable, from another process at the older poll's
  next re-check, which reads the session's newest poll ticket.
* **At most ``PLUMB_WAITING_POLLS`` waiting polls per process** (half its
  threads by default). Past it a poll answers at once, as if it had not
  asked to wait, rather than take a thread other calls need.
"""

from __future__ import annotations

import threading

from django.conf import settings

from common.gate import gate

POLL_INTERVAL = 0.5

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
    """Block until a note is committed in this process, or ``timeout`` passes."""
    with gate().stepped_aside(), _condition:
        if _generation == since_generation:
            _condition.wait(timeout)


def poll_enter(session_id: int, ticket: str) -> bool:
    """Take one of the process's waiting places for ``ticket``; False if all are taken.

    The session's older poll in this process, if any, is superseded and woken.
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
    """Whether a newer poll of the session has started in this process."""
    with _condition:
        return _newest.get(session_id, ticket) != ticket


def waiting_polls() -> int:
    with _condition:
        return _waiting
