"""``common.locks.held_alone``: one holder at a time, across connections, on both databases."""

from __future__ import annotations

import threading

import pytest
from django.db import connections

from common.locks import held_alone
from tests.races import TIMEOUT

pytestmark = pytest.mark.django_db(transaction=True)


def hold_in_thread(name: str) -> tuple[threading.Event, threading.Event, dict]:
    """A thread of its own (own connection) that takes ``name`` and holds it until told."""
    taken, release, outcome = threading.Event(), threading.Event(), {}

    def run() -> None:
        try:
            with held_alone(name) as held:
                outcome["held"] = held
                taken.set()
                release.wait(TIMEOUT)
        finally:
            taken.set()
            connections.close_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    outcome["thread"] = thread
    return taken, release, outcome


def test_a_second_holder_is_told_no_while_the_first_holds_it_and_yes_after():
    taken, release, first = hold_in_thread("jobs")
    assert taken.wait(TIMEOUT)

    with held_alone("jobs") as while_held:
        pass
    release.set()
    first["thread"].join(TIMEOUT)
    with held_alone("jobs") as after:
        pass

    assert first["held"] is True
    assert while_held is False
    assert after is True


def test_locks_of_different_names_do_not_exclude_each_other():
    taken, release, first = hold_in_thread("jobs")
    assert taken.wait(TIMEOUT)

    with held_alone("other") as other:
        pass
    release.set()
    first["thread"].join(TIMEOUT)

    assert (first["held"], other) == (True, True)
