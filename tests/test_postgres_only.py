"""The tests that need PostgreSQL itself, run on a throwaway cluster during a SQLite run.

On SQLite ``tests/conftest.py`` leaves the ``postgresql``-marked tests out of the
run; this one runs them all in a pytest of their own under
``scripts/with-postgres``, as ``make test-postgres`` would, so that ``make
test`` alone runs every test and skips none. Under ``make test-postgres`` they
run in place, and this test is what is left out.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def test_the_postgresql_only_tests_pass_on_a_throwaway_postgresql():
    if connection.vendor == "postgresql":
        pytest.fail("under PostgreSQL this test is deselected (tests/conftest.py)")
    done = subprocess.run(
        [
            str(ROOT / "scripts" / "with-postgres"),
            sys.executable,
            "-m",
            "pytest",
            "-m",
            "postgresql",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )

    print(done.stdout[-2000:])
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout
    assert "skipped" not in done.stdout
