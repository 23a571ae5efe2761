"""One holder at a time, across every process and host that shares the database.

For work that must not run twice at once but may simply be skipped when
someone else is doing it (plumb's periodic jobs, ``plumb_site/jobs.py``):
:func:`held_alone` never waits, it says whether the caller got the lock.

* **PostgreSQL**: a session-level advisory lock (``pg_try_advisory_lock``) on
  the caller's connection, so every host that shares the database takes
  part. It outlives the transactions inside the block, which is why it is
  a session lock, and it is released at the block's end, or by PostgreSQL
  when the connection dies.
* **SQLite**: ``flock`` on a file beside the database file. SQLite serves
  one host, whose processes all see that file; the kernel releases the lock
  when the descriptor closes, also when its process dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def held_alone(name: str, *, using: str = DEFAULT_DB_ALIAS) -> Iterator[bool]:
    """Yield True while the caller holds the lock ``name``, False if another holder has it.

    Never waits. Not re-entrant: a second block of the same name inside the
    first, on the same connection, is told True on PostgreSQL and False on
    SQLite, so do not nest them.
    """
    connection = connections[using]
    if connection.vendor == "postgresql":
        with _advisory(connection, _key(name)) as held:
            yield held
    else:
        with _flocked(_lock_path(connection, name)) as held:
            yield held


def _key(name: str) -> int:
    """A stable 64-bit advisory lock key for ``name``, the same in every process."""
    return int.from_bytes(hashlib.sha256(f"plumb:{name}".encode()).digest()[:8], "big", signed=True)


@contextlib.contextmanager
def _advisory(connection, key: int) -> Iterator[bool]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
        held = bool(cursor.fetchone()[0])
    try:
        yield held
    finally:
        if held:
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(%s)", [key])
            except Exception:
                # Whatever broke the connection, closing it releases the lock.
                logger.warning("could not release advisory lock %s; closing", key, exc_info=True)
                connection.close()


def _lock_path(connection, name: str) -> Path:
    database = str(connection.settings_dict["NAME"])
    if database == ":memory:" or "mode=memory" in database:
        return Path(settings.VAR_DIR) / f"{name}.lock"
    return Path(f"{database}-{name}.lock")


@contextlib.contextmanager
def _flocked(path: Path) -> Iterator[bool]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held = False
        else:
            held = True
        yield held
    finally:
        os.close(fd)  # releases the lock, if this descriptor held it
