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
"""

from __future__ import annotations

import asyncio
from typing import Any

from asgiref.local import _ThreadCriticalLocal
from django.db import connections


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
    """Swap the class of Django's connection storage (its connections stay where they are)."""
    swap(connections._connections)


def swap(storage: Any) -> None:
    """Make asgiref's thread-critical ``storage`` a ``_Storage``; anything else is left as it is."""
    if type(storage) is _ThreadCriticalLocal:
        # Local's own __setattr__ would set the attribute on the thread's storage.
        object.__setattr__(storage, "__class__", _Storage)
