"""The benchmark counts PostgreSQL's CPU beside the server's, where the cluster runs here.

A PostgreSQL call costs its backend too: statements, round trips, the commit's
WAL write, the ``NOTIFY`` its listeners hear. ``bench/serving.py`` finds the
cluster's postmaster from the database URL and sums its processes' CPU, and
``bench/load.py``, ``bench/report.py`` and ``bench/compare.py`` show it per
call. These tests hold the reading to what the cluster did, and the tables to
showing it only where every phase has it.
"""

from __future__ import annotations

import importlib
import sys
import time
import urllib.parse
from pathlib import Path

import psycopg
import pytest
from django.conf import settings
from django.db import connection

from common import wake

BENCH_DIR = Path(settings.BASE_DIR) / "bench"
BENCH_MODULES = ("serving", "load", "report", "mcp_ops")


@pytest.fixture
def bench(monkeypatch):
    """bench/'s modules, imported as its scripts import them, and forgotten afterwards."""
    monkeypatch.syspath_prepend(str(BENCH_DIR))
    for name in BENCH_MODULES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    modules = {name: importlib.import_module(name) for name in ("serving", "load", "report")}
    yield modules
    for name in BENCH_MODULES:
        sys.modules.pop(name, None)


def phase(load, *, completed: int, database_cpu: float | None):
    return load.PhaseResult(
        completed=completed,
        errors=0,
        seconds=1.0,
        latencies=[0.001] * completed,
        server_cpu=0.5,
        server_sys=0.1,
        database_cpu=database_cpu,
    )


def result(operations: dict) -> dict:
    return {
        "db": "postgres",
        "meta": {
            "when": "now",
            "commit": "abc",
            "cpus": 2,
            "python": "3.11",
            "database_version": "PostgreSQL 15",
            "workers": 2,
            "threads": 4,
            "active_requests": "all",
            "clients": 8,
            "rounds": 2,
            "requests": 1000,
            "loadavg_before": "0 0 0",
        },
        "main": {"operations": operations, "queries": {}, "worker_peak_rss_mib": 80},
        "targets": [],
    }


def figures(load, label: str, phases: list) -> dict:
    return {**load.summarise(phases), "label": label, "ratio_to_floor": 1.0}


def test_a_phase_shows_the_databases_cpu_per_call_only_where_every_round_has_it(bench):
    load, report = bench["load"], bench["report"]
    measured = [
        phase(load, completed=1000, database_cpu=0.5),
        phase(load, completed=1000, database_cpu=0.7),
    ]
    assert load.summarise(measured)["database_cpu_ms_per_op"] == 0.6
    assert (
        load.summarise([phase(load, completed=1000, database_cpu=None)])["database_cpu_ms_per_op"]
        is None
    )
    # A round without it (the cluster's files unreadable for a moment) leaves the figure out.
    partly = [*measured, phase(load, completed=1000, database_cpu=None)]
    assert load.summarise(partly)["database_cpu_ms_per_op"] is None

    shown = report.markdown(result({"floor": figures(load, "floor", measured)}))
    assert "| of which system | PostgreSQL CPU ms/op |" in shown
    assert "| 0.50 | 0.10 | 0.60 |" in shown
    hidden = report.markdown(
        result(
            {
                "floor": figures(load, "floor", measured),
                "send": figures(load, "send", partly),
            }
        )
    )
    assert "PostgreSQL CPU" not in hidden
    assert "| of which system |\n" in hidden


def test_no_postmaster_for_sqlite_or_a_cluster_it_cannot_reach(bench):
    serving = bench["serving"]
    assert serving.postmaster_pid("sqlite:///nowhere.sqlite3") is None
    assert serving.postmaster_pid("postgres://nobody@127.0.0.1:1/none?connect_timeout=2") is None


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_the_clusters_cpu_counts_its_backends_live_and_ended(bench):
    serving = bench["serving"]
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (backend,) = cursor.fetchone()
    conf = connection.settings_dict
    host = urllib.parse.quote(conf["HOST"], safe="")
    url = f"postgres://{conf['USER']}@{host}:{conf['PORT']}/{conf['NAME']}"
    postmaster = serving.postmaster_pid(url)
    assert postmaster is not None
    assert str(backend) in Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text()
    server = serving.Server(
        process=None, port=0, env={}, log_path=Path("/dev/null"), database_pid=postmaster
    )

    def burn(conn: psycopg.Connection) -> None:
        # Sorting generated rows keeps the backend on the CPU for a fraction of a second.
        conn.execute(
            "SELECT count(*) FROM (SELECT g FROM generate_series(1, 400000) g ORDER BY g % 7) s"
        )

    params = {**wake.postgres._listen_params("default"), "application_name": "plumb-test"}
    with psycopg.connect(**params) as live:
        before = server.database_cpu_seconds()
        for _ in range(3):
            burn(live)
        during = server.database_cpu_seconds()
    assert during - before >= 0.05, (before, during)

    # A backend that starts and ends between two readings counts once it is reaped.
    ended = psycopg.connect(**params)
    gone = ended.info.backend_pid
    with ended:
        for _ in range(3):
            burn(ended)
    deadline = time.monotonic() + 10
    children = Path(f"/proc/{postmaster}/task/{postmaster}/children")
    while str(gone) in children.read_text().split() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert str(gone) not in children.read_text().split()
    after = server.database_cpu_seconds()
    assert after - during >= 0.05, (during, after)
