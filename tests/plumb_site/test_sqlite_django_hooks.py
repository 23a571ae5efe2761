"""The private Django API plumb's SQLite writer queue stands on: the hooks it overrides
still exist with the same signatures, and Django still calls them where the queue
expects.

These tests use their own SQLite file through plumb's backend, so they run whichever
database the rest of the suite uses.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterator
from pathlib import Path

import django
import pytest
from django.contrib.contenttypes.models import ContentType
from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.sqlite3 import base as django_sqlite
from django.db.backends.sqlite3 import creation as django_creation
from django.db.backends.sqlite3.base import SQLiteCursorWrapper

from plumb_site.sqlite import base as queue_backend
from tests.plumb_site.sqlite_queue import _count, _handler, _wrapper, _write_in_transaction

pytestmark = pytest.mark.usefixtures("own_database_allowed")


# plumb_site/sqlite/base.py overrides hooks that Django does not document. A
# Django upgrade that renames them, changes their arguments or stops calling
# them would let writers past the queue (or leave it held) without an error:
# these tests say so by name instead.


def _django_changed(what: str, recheck: str) -> str:
    return (
        f"Django {django.get_version()}: {what}. plumb_site/sqlite/base.py overrides this "
        f"private hook to queue SQLite writers; re-check {recheck}, then update it and this test."
    )


_HOOKS = [
    (
        django_sqlite.DatabaseWrapper,
        queue_backend.DatabaseWrapper,
        "_start_transaction_under_autocommit",
        "(self)",
        "that atomic() still begins through it (BaseDatabaseWrapper.set_autocommit)",
    ),
    (
        BaseDatabaseWrapper,
        queue_backend.DatabaseWrapper,
        "_commit",
        "(self)",
        "that commit() and atomic()'s exit still end the transaction through it",
    ),
    (
        BaseDatabaseWrapper,
        queue_backend.DatabaseWrapper,
        "_rollback",
        "(self)",
        "that rollback() and atomic()'s exit on an error still end the transaction through it",
    ),
    (
        BaseDatabaseWrapper,
        queue_backend.DatabaseWrapper,
        "_close",
        "(self)",
        "that close() still closes the connection through it",
    ),
    (
        django_sqlite.DatabaseWrapper,
        queue_backend.DatabaseWrapper,
        "create_cursor",
        "(self, name=None)",
        "that cursor() still makes its cursors through it",
    ),
    (
        SQLiteCursorWrapper,
        queue_backend.CursorWrapper,
        "execute",
        "(self, query, params=None)",
        "that Django's CursorWrapper still runs every statement through it",
    ),
    (
        SQLiteCursorWrapper,
        queue_backend.CursorWrapper,
        "executemany",
        "(self, query, param_list)",
        "that Django's CursorWrapper still runs executemany() through it",
    ),
    (
        SQLiteCursorWrapper,
        queue_backend.CursorWrapper,
        "convert_query",
        "(self, query, *, param_names=None)",
        "how execute() converts format and pyformat parameters",
    ),
    (
        django_creation.DatabaseCreation,
        queue_backend.DatabaseCreation,
        "_destroy_test_db",
        "(self, test_database_name, verbosity)",
        "that destroy_test_db() still deletes the file through it",
    ),
]


def _parameters(function) -> str:
    return str(inspect.signature(function).replace(return_annotation=inspect.Signature.empty))


@pytest.mark.parametrize(
    ("django_class", "plumb_class", "name", "signature", "recheck"),
    _HOOKS,
    ids=[f"{hook[0].__name__}.{hook[2]}" for hook in _HOOKS],
)
def test_django_still_has_the_hooks_the_queue_overrides(
    django_class, plumb_class, name, signature, recheck
):
    hook = getattr(django_class, name, None)
    assert hook is not None, _django_changed(f"{django_class.__qualname__}.{name} is gone", recheck)
    assert _parameters(hook) == signature, _django_changed(
        f"{django_class.__qualname__}.{name} now takes {_parameters(hook)}, not {signature}",
        recheck,
    )
    assert issubclass(plumb_class, django_class)
    assert _parameters(getattr(plumb_class, name)) == signature  # plumb's override matches


def test_django_still_has_the_pattern_the_cached_conversion_uses():
    assert hasattr(django_sqlite, "FORMAT_QMARK_REGEX"), _django_changed(
        "django.db.backends.sqlite3.base.FORMAT_QMARK_REGEX is gone",
        "SQLiteCursorWrapper.convert_query, which CursorWrapper.convert_query caches",
    )


@pytest.fixture
def alias(database) -> Iterator[str]:
    """The test's database as a connection of Django's own, for atomic() and the ORM."""
    name = "sqlite_queue_test"
    connections.settings[name] = _handler(database).settings["default"]
    try:
        yield name
    finally:
        connections[name].close()
        del connections[name]
        del connections.settings[name]


def _spy(monkeypatch, connection, names: list[str]) -> list[str]:
    calls: list[str] = []
    for name in names:
        original = getattr(connection, name)

        def spy(*args, _name=name, _original=original, **kwargs):
            calls.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(connection, name, spy)
    return calls


class _Boom(Exception):
    pass


def test_atomic_takes_and_gives_back_the_turn_through_the_overridden_hooks(
    alias, database, monkeypatch
):
    connection = connections[alias]
    queue = queue_backend._queue_for(database)
    calls = _spy(
        monkeypatch,
        connection,
        ["_start_transaction_under_autocommit", "_commit", "_rollback", "_close"],
    )

    with transaction.atomic(using=alias):
        assert calls == ["_start_transaction_under_autocommit"], _django_changed(
            f"atomic() began its transaction with {calls}",
            "BaseDatabaseWrapper.set_autocommit and Atomic.__enter__",
        )
        assert queue.thread_lock.locked()
        with transaction.atomic(using=alias), connection.cursor() as cursor:  # a savepoint
            cursor.execute("UPDATE counter SET n = n + 1")
    assert calls[1:] == ["_commit"], _django_changed(
        f"atomic()'s exit called {calls[1:]}", "Atomic.__exit__ and BaseDatabaseWrapper.commit"
    )
    assert not queue.thread_lock.locked()

    with pytest.raises(_Boom), transaction.atomic(using=alias):
        raise _Boom
    assert calls[2:] == ["_start_transaction_under_autocommit", "_rollback"], _django_changed(
        f"atomic() around an error called {calls[2:]}",
        "Atomic.__exit__ and BaseDatabaseWrapper.rollback",
    )
    assert not queue.thread_lock.locked()

    connection.close()
    assert calls[4:] == ["_close"], _django_changed(
        f"close() called {calls[4:]}", "BaseDatabaseWrapper.close and the SQLite backend's close"
    )
    assert _count(database) == 1


def test_an_orm_update_outside_atomic_runs_in_its_turn_on_plumbs_cursor(alias, monkeypatch):
    # QuerySet.update() and save() in autocommit open no transaction: the
    # statement reaches plumb's cursor with sqlite3 in autocommit, which is
    # where the queue catches it.
    connection = connections[alias]
    with connection.schema_editor() as editor:
        editor.create_model(ContentType)
    with connection.cursor() as cursor:
        assert isinstance(cursor.cursor, queue_backend.CursorWrapper), _django_changed(
            f"cursor() made a {type(cursor.cursor).__qualname__}",
            "BaseDatabaseWrapper._cursor and create_cursor",
        )
    assert connection.connection.isolation_level is None, _django_changed(
        "autocommit no longer leaves sqlite3's isolation_level at None",
        "DatabaseWrapper._set_autocommit: CursorWrapper.execute reads sqlite3's in_transaction",
    )
    written: list[str] = []
    original = connection._write_in_turn

    def spy(execute, query, params):
        written.append(query.split()[0])
        return original(execute, query, params)

    monkeypatch.setattr(connection, "_write_in_turn", spy)

    kind = ContentType.objects.using(alias).create(app_label="plumb", model="queue")
    ContentType.objects.using(alias).filter(pk=kind.pk).update(model="queued")
    assert ContentType.objects.using(alias).get(pk=kind.pk).model == "queued"

    assert written == ["INSERT", "UPDATE"], _django_changed(
        f"the ORM's writes outside atomic() reached the queue as {written}",
        "QuerySet.update(), Model.save() and CursorWrapper.execute",
    )


def test_destroying_a_test_database_takes_its_queue_files_along(database):
    wrapper = _wrapper(database)
    _write_in_transaction(wrapper, "UPDATE counter SET n = 1")
    assert Path(database + "-writers.wake").exists()

    wrapper.creation.destroy_test_db(verbosity=0)

    assert not Path(database).exists()
    for suffix in ("-writers.lock", "-writers.wake"):
        assert not Path(database + suffix).exists(), _django_changed(
            f"destroy_test_db() left {suffix}",
            "BaseDatabaseCreation.destroy_test_db and DatabaseCreation._destroy_test_db",
        )
    assert (os.getpid(), database) not in queue_backend._queues
