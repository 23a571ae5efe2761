"""Wake long-polling ``check_messages`` calls when a note is committed.

Within one server process a condition variable wakes waiters at once. Notes
sent through another process are found by the waiter's periodic re-check
(``POLL_INTERVAL``), so a poller sees a note within about a second whatever
process stored it, at the cost of one indexed query per interval per waiter.
A waiter steps out of its process's request gate while it sleeps, so idle
pollers never hold up the requests that have work to do.
"""

import threading

from common.gate import gate

POLL_INTERVAL = 0.5

_condition = threading.Condition()
_generation = 0


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
