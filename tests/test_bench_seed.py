"""The benchmark's seeding runs against today's models.

``bench/seed.py`` writes history with plain SQL for speed, so it names every
column itself and asserts the models still have exactly those: a model that
gains a column stops ``make bench`` at once. Nothing else in the suite runs
the seeding, so this test does, on a tiny SQLite database of its own, with
the same subprocess and environment ``make bench`` uses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

APP_DIR = Path(settings.BASE_DIR)


def run(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        args, cwd=APP_DIR, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.sqlite  # its database is its own SQLite file: once per suite is enough
def test_the_bench_seeds_a_fresh_database_and_grows_it(tmp_path):
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PLUMB_", "DJANGO_")) and k not in {"DATABASE_URL", "DEBUG"}
    }
    env |= {
        "DATABASE_URL": f"sqlite:///{tmp_path / 'bench.sqlite3'}",
        "DJANGO_SETTINGS_MODULE": "plumb_site.settings",
        "PLUMB_VAR_DIR": str(tmp_path / "var"),
        "SECRET_KEY": "bench-" + "x" * 50,
        "BENCH_APP_DIR": str(APP_DIR),
        "PYTHONPATH": str(APP_DIR),
    }
    python, seed = sys.executable, str(APP_DIR / "bench" / "seed.py")
    run(env, python, "manage.py", "migrate", "--noinput")

    out = run(env, python, seed, "setup", "--clients", "2", "--rounds", "1", "--spread", "2",
              "--read-events", "120", "--pool", "3")  # fmt: skip
    state = json.loads(out.strip().splitlines()[-1])
    assert len(state["pool"]) == 3
    state_path = tmp_path / "state.json"
    state_path.write_text(json.dumps(state))
    run(env, python, seed, "queries", "--state", str(state_path))

    # The growth phases bulk-load notes, room events and their search index.
    run(env, python, seed, "grow", "--state", str(state_path), "--rows", "200")
