"""Fixtures of the SQLite backend tests (``tests/plumb_site/test_sqlite_*.py``): a
database file of their own, through plumb's backend."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from plumb_site.sqlite import base as queue_backend
from tests.plumb_site.sqlite_queue import _create


@pytest.fixture
def own_database_allowed(django_db_blocker):
    # pytest-django guards the project's database; these tests use a file of their own.
    # Asked for by each file's pytestmark: autouse here would reach every test beside them.
    with django_db_blocker.unblock():
        yield


@pytest.fixture
def database(tmp_path: Path) -> Iterator[str]:
    path = _create(str(tmp_path / "queue.sqlite3"))
    yield path
    queue = queue_backend._queues.pop((os.getpid(), path), None)
    if queue is not None:
        queue.close()
