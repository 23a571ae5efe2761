"""Django's connection storage, looked up without an exception (plumb_site/connections.py).

Every answer is held to asgiref's own thread-critical ``Local``, in a thread
with no event loop (where plumb runs Django) and under a running loop.
"""

from __future__ import annotations

import asyncio
import threading

import pytest
from asgiref.local import Local
from django.db import connections

from plumb_site.connections import _Storage, install, swap


def _ours() -> _Storage:
    storage = Local(thread_critical=True)
    swap(storage)
    assert type(storage) is _Storage
    return storage


def _story(storage) -> list:
    """What a storage answers, step by step: in this thread, another, and under loops."""
    seen = []

    def look(key):
        try:
            seen.append(getattr(storage, key))
        except AttributeError as exc:
            seen.append(("missing", type(exc)))

    look("default")
    storage.default = "here"
    look("default")
    look("other")
    thread = threading.Thread(target=look, args=("default",))  # another thread's storage
    thread.start()
    thread.join()

    async def in_a_loop():
        look("default")  # a running loop has a storage of its own
        storage.default = "in the loop"
        look("default")
        await asyncio.sleep(0)
        look("default")

        async def in_a_task():
            look("default")  # a task starts from a copy of its creator's context
            storage.default = "in the task"
            look("default")

        await asyncio.ensure_future(in_a_task())
        look("default")

    asyncio.run(in_a_loop())
    look("default")  # and the thread's is as it was
    del storage.default
    look("default")
    seen.append(type(storage._storage).__name__)  # a Local's own attributes are its own
    return seen


def test_a_storage_answers_as_asgirefs_in_a_thread_and_under_a_loop():
    theirs = _story(Local(thread_critical=True))
    missing = ("missing", AttributeError)
    assert theirs == [
        missing,
        "here",
        missing,
        missing,  # another thread
        missing,  # a running loop's own
        "in the loop",
        "in the loop",
        "in the loop",  # in the task, from its creator's context
        "in the task",
        "in the loop",  # the task's write stays in the task
        "here",
        missing,
        "_local",
    ]
    assert _story(_ours()) == theirs


def test_a_storage_forgets_as_asgirefs_does():
    for storage in (_ours(), Local(thread_critical=True)):
        with pytest.raises(AttributeError):
            del storage.nothing
        with pytest.raises(AttributeError):
            storage.nothing  # noqa: B018


def test_djangos_connections_use_it_and_keep_their_connection():
    assert type(connections._connections) is _Storage
    connection = connections["default"]
    install()  # a second time changes nothing
    assert connections["default"] is connection
    assert type(connections._connections) is _Storage
