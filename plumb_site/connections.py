"""Django's connection for this thread, found without an exception each time.

``django.db.connections`` keeps each thread's connections in asgiref's
thread-critical ``Local``. Looking one up raises and catches two exceptions:
Python's own attribute look-up fails on the ``Local`` (an alias is never an
attribute of it) before its ``__getattr__`` is asked, and that asks
``asyncio.get_running_loop()``, which raises ``RuntimeError`` in the threads
where plumb runs Django. A send looks its connection up 14 times, a GET 7
(Django's request signals, ``transaction.atomic``, plumb's prepared
statements): 0.9 µs each, 0.3 µs here. ``_Storage`` goes to the storage
straight away for an alias and asks ``asyncio._get_running_loop()``, which
answers ``None`` rather than raising; with a loop running in the thread,
asgiref's own code answers. The class it extends is asgiref's private one;
``tests/plumb_site/test_connections.py`` holds every answer to asgiref's, in
a thread and under a running loop.

The connection's own methods ask the same question: Django wraps each one
that must not run under an event loop (``cursor``, ``get_autocommit``,
``set_autocommit``, ``commit`` and more) in ``async_unsafe``, which calls
``asyncio.get_running_loop()`` and catches its ``RuntimeError``: 12 times a
send, 0.47 µs each. ``check_loops_cheaply`` sets each such method on the
connection's class as one that asks ``asyncio._get_running_loop()`` and, with
no loop running, calls the method Django wrapped; with one running, Django's
own wrapper answers (its refusal, or ``DJANGO_ALLOW_ASYNC_UNSAFE``).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable
from typing import Any

from asgiref.local import _ThreadCriticalLocal
from django.db import connections
from django.utils.asyncio import async_unsafe


class _Storage(_ThreadCriticalLocal):
    __slots__ = ()

    def _get_storage(self) -> Any:
        if asyncio._get_running_loop() is None:
            return _object_getattribute(self, "_storage")  # asgiref's answer in a sync thread
        return super()._get_storage()

    def __getattribute__(self, key: str) -> Any:
        if key[:1] == "_":
            return _object_getattribute(self, key)
        # A connection's alias: never an attribute of the Local itself, so Python's
        # own look-up would fail (raising AttributeError) before asking __getattr__.
        return getattr(_Storage._get_storage(self), key)


_object_getattribute = object.__getattribute__


def install() -> None:
    """Swap the class of Django's connection storage (its connections stay where they are),
    and check for a running loop cheaply in each configured backend's connection class."""
    swap(connections._connections)
    for alias in connections:
        check_loops_cheaply(type(connections[alias]))


# The code of async_unsafe's wrapper: one for every method it wraps.
_ASYNC_UNSAFE = async_unsafe(lambda: None).__code__


def check_loops_cheaply(wrapper_class: type) -> list[str]:
    """Set each method of ``wrapper_class`` that ``async_unsafe`` wrapped on it, checked cheaply.

    Returns their names. A method set already (a second call) is left as it is.
    """
    names = []
    for name in dir(wrapper_class):
        method = inspect.getattr_static(wrapper_class, name)
        if getattr(method, "__code__", None) is _ASYNC_UNSAFE:
            setattr(wrapper_class, name, _checked_cheaply(method.__wrapped__, method))
            names.append(name)
    return names


def _checked_cheaply(func: Callable, djangos: Callable) -> Callable:
    @functools.wraps(func)
    def checked(*args: Any, **kwargs: Any) -> Any:
        if asyncio._get_running_loop() is None:
            return func(*args, **kwargs)
        return djangos(*args, **kwargs)

    checked.async_unsafe = djangos  # Django's, for the tests and for anyone who looks
    return checked


def swap(storage: Any) -> None:
    """Make asgiref's thread-critical ``storage`` a ``_Storage``; anything else is left as it is."""
    if type(storage) is _ThreadCriticalLocal:
        # Local's own __setattr__ would set the attribute on the thread's storage.
        object.__setattr__(storage, "__class__", _Storage)
