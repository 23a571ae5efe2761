"""Waiting calls of one session held elsewhere, for the tests of ``mailbox/wakeups.py``.

A session keeps up to ``WAITS_PER_SESSION`` waiting calls side by side; a
test that wants the next call to be the one too many records the others'
tickets directly, as calls waiting in another process would have.
"""

from __future__ import annotations

from mailbox.models import Session
from mailbox.wakeups import WAITS_PER_SESSION

FAR = 9_999_999_999  # an expiry no test outlives


def wait_elsewhere(session: Session, count: int) -> None:
    """Record ``count`` more waiting calls of ``session``, newest last."""
    row = Session.objects.get(pk=session.pk)
    entries = row.poll_tickets.split() + [f"elsewhere{i}/{FAR}" for i in range(count)]
    row.poll_tickets = " ".join(entries[-WAITS_PER_SESSION:])
    Session.objects.filter(pk=session.pk).update(poll_tickets=row.poll_tickets)


def fill_but_one(session: Session) -> None:
    """Take every place of ``session`` but the newest: its next waiting call is one too many."""
    taken = len(Session.objects.get(pk=session.pk).poll_tickets.split())
    wait_elsewhere(session, WAITS_PER_SESSION - taken)
