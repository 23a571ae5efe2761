"""Start-up checks (plumb_site/checks.py): a SQLite built without FTS5 stops manage.py
and the server with one clear message naming the build option, not a cryptic error at
the first search or migration."""

from __future__ import annotations

import inspect
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from plumb_site import checks


class NoFts5:
    """A SQLite connection that refuses FTS5 tables, as one built without FTS5 does."""

    def __init__(self, real: sqlite3.Connection) -> None:
        self.real = real

    def execute(self, sql: str, *args):
        if "fts5" in sql.lower():
            raise sqlite3.OperationalError("no such module: fts5")
        return self.real.execute(sql, *args)

    def __getattr__(self, name: str):
        return getattr(self.real, name)


# The same, for a process of its own: its sqlite3 module hands out only such connections.
NO_FTS5 = f"""
import sqlite3
{inspect.getsource(NoFts5)}
_connect = sqlite3.connect
sqlite3.connect = lambda *a, **k: NoFts5(_connect(*a, **k))
"""


@pytest.fixture
def without_fts5(monkeypatch):
    real = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: NoFts5(real(*a, **k)))
    monkeypatch.setattr(checks, "uses_sqlite", lambda: True)


def test_this_pythons_sqlite_has_fts5():
    assert checks.sqlite_fts5_missing() is None


def test_a_sqlite_without_fts5_is_an_error_naming_the_build_option(without_fts5):
    (error,) = checks.check_sqlite_fts5()

    assert error.id == "plumb.E001"
    assert error.is_serious()
    assert "SQLITE_ENABLE_FTS5" in error.msg
    assert "PostgreSQL" in error.hint


def test_manage_py_commands_stop_on_it(without_fts5):
    with pytest.raises(SystemCheckError, match=r"plumb\.E001"):
        call_command("check")


def test_postgresql_needs_no_fts5(monkeypatch):
    monkeypatch.setattr(checks, "uses_sqlite", lambda: False)
    monkeypatch.setattr(checks, "sqlite_fts5_missing", lambda: "never asked")
    assert checks.check_sqlite_fts5() == []


def test_the_server_refuses_to_start_with_one_line(tmp_path: Path):
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("PLUMB_", "DJANGO"))}
    environment.update(
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        PLUMB_VAR_DIR=str(tmp_path),
    )
    done = subprocess.run(
        [sys.executable, "-c", NO_FTS5 + "import plumb_site.gunicorn_config\n"],
        cwd=settings.BASE_DIR,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("plumb: The SQLite")
    assert "SQLITE_ENABLE_FTS5" in lines[0]
