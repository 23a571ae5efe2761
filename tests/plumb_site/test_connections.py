"""Django's connection storage, looked up without an exception (plumb_site/connections.py).

Every answer is held to asgiref's own thread-critical ``Local``, in a thread
with no event loop (where plumb runs Django) and under a running loop.
"""

from __future__ import annotations

import asyncio
import inspect
import threading

import pytest
from asgiref.local import Local
from django.db import connections

from plumb_site.connections import _ASYNC_UNSAFE, _Storage, check_loops_cheaply, install, swap


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


# A connection's own methods: async_unsafe's check made without an exception.


def _wrapped_by_async_unsafe(cls) -> list[str]:
    return [
        name
        for name in dir(cls)
        if getattr(inspect.getattr_static(cls, name), "__code__", None) is _ASYNC_UNSAFE
    ]


def _database_classes():
    return [type(connections[alias]) for alias in connections]


def test_every_method_django_guards_is_checked_cheaply_on_each_backend():
    for cls in _database_classes():
        assert _wrapped_by_async_unsafe(cls) == []
        checked = [
            name
            for name in dir(cls)
            if getattr(inspect.getattr_static(cls, name), "async_unsafe", None) is not None
        ]
        assert {"cursor", "connect", "ensure_connection", "commit", "rollback"} <= set(checked)
        for name in checked:
            method = inspect.getattr_static(cls, name)
            # Django's method itself, under Django's own wrapper for a running loop.
            assert method.__wrapped__ is method.async_unsafe.__wrapped__
            assert method.async_unsafe.__code__ is _ASYNC_UNSAFE


def test_a_class_of_djangos_own_gets_each_guarded_method_once():
    from django.db.backends.base.base import BaseDatabaseWrapper

    cls = type("Wrapper", (BaseDatabaseWrapper,), {})
    before = _wrapped_by_async_unsafe(cls)

    assert check_loops_cheaply(cls) == before
    assert before
    assert _wrapped_by_async_unsafe(cls) == []
    assert check_loops_cheaply(cls) == []
    assert _wrapped_by_async_unsafe(BaseDatabaseWrapper) == before  # Django's class left alone


@pytest.mark.django_db(transaction=True)
def test_under_a_running_loop_djangos_own_check_refuses(monkeypatch):
    from django.core.exceptions import SynchronousOnlyOperation
    from django.db import connection

    async def under_a_loop():
        with pytest.raises(SynchronousOnlyOperation, match="async context"):
            connection.cursor()
        monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        try:
            with connection.cursor() as cursor:  # Django's own way through, when allowed
                cursor.execute("SELECT 1")
                return cursor.fetchone()
        finally:
            # Under a running loop the thread's connection is another one, kept in the
            # loop's context: closed here, or PostgreSQL keeps it until the run ends.
            connection.close()

    assert asyncio.run(under_a_loop()) == (1,)
    with connection.cursor() as cursor:  # and with no loop, as always
        cursor.execute("SELECT 2")
        assert cursor.fetchone() == (2,)
