"""System checks of what plumb needs from the machine it runs on.

Django runs them before ``manage.py`` commands (``migrate`` and ``make serve``
included); the server's gunicorn configuration asks the same question
before any worker starts.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, register

SQLITE_ENGINE = "plumb_site.sqlite"


def sqlite_fts5_missing() -> str | None:
    """Why this Python's SQLite cannot hold plumb's search index, or None if it can.

    The index is an FTS5 table (``common/search/index.py``); FTS5 is a build
    option of SQLite (``SQLITE_ENABLE_FTS5``), on in most builds but not all.
    Asked by creating such a table in memory, which is what the index needs.
    """
    try:
        probe = sqlite3.connect(":memory:")
        try:
            probe.execute("CREATE VIRTUAL TABLE probe USING fts5(document, tokenize = 'ascii')")
        finally:
            probe.close()
    except sqlite3.Error as exc:
        return (
            f"The SQLite {sqlite3.sqlite_version} of this Python was built without FTS5 "
            f"(build option SQLITE_ENABLE_FTS5; SQLite said: {exc}), and plumb's search "
            "index needs it."
        )
    return None


def uses_sqlite() -> bool:
    return any(db["ENGINE"] == SQLITE_ENGINE for db in settings.DATABASES.values())


@register()
def check_sqlite_fts5(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    if not uses_sqlite():
        return []
    problem = sqlite_fts5_missing()
    if problem is None:
        return []
    return [
        Error(
            problem,
            hint="Run plumb with a Python whose sqlite3 module has FTS5 (python.org's and "
            "Debian's builds do), or on PostgreSQL (DATABASE_URL=postgres://...).",
            id="plumb.E001",
        )
    ]
