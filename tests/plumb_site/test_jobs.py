"""plumb's periodic jobs (plumb_site/jobs.py): due jobs run at their own intervals,
one runner at a time across processes, and a failing job stops nothing."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connections

from plumb_site import jobs
from tests.races import TIMEOUT

pytestmark = pytest.mark.django_db(transaction=True)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def runner_with(*job_list: jobs.Job, clock: Clock) -> jobs.Runner:
    runner = jobs.Runner(job_list, clock=clock)
    clock.now += jobs.MIN_PAUSE + jobs.JITTER  # past the first round's random start
    return runner


def test_each_job_runs_when_due_at_its_own_interval():
    clock = Clock()
    runs: list[str] = []
    runner = runner_with(
        jobs.Job("often", every=10, run=lambda: runs.append("often")),
        jobs.Job("seldom", every=3600, run=lambda: runs.append("seldom")),
        clock=clock,
    )

    assert runner.run_due() == ["often", "seldom"]
    clock.now += 5
    assert runner.run_due() == []
    clock.now += 5
    assert runner.run_due() == ["often"]
    assert runs == ["often", "seldom", "often"]


def test_a_failing_job_is_logged_and_the_others_still_run(caplog):
    clock = Clock()
    runs: list[str] = []

    def fail() -> None:
        raise RuntimeError("boom")

    runner = runner_with(
        jobs.Job("broken", every=10, run=fail),
        jobs.Job("fine", every=10, run=lambda: runs.append("fine")),
        clock=clock,
    )

    assert runner.run_due() == ["broken", "fine"]
    assert runs == ["fine"]
    assert "job broken failed" in caplog.text


def test_of_two_runners_only_one_runs_jobs_at_a_time():
    started, release = threading.Event(), threading.Event()
    runs: list[str] = []

    def slow() -> None:
        runs.append("slow")
        started.set()
        release.wait(TIMEOUT)

    first = runner_with(jobs.Job("sweep", every=10, run=slow), clock=Clock())
    second = runner_with(jobs.Job("sweep", every=10, run=slow), clock=Clock())
    ran_first: list[list[str]] = []

    def run_first() -> None:
        try:
            ran_first.append(first.run_due())
        finally:
            connections.close_all()

    thread = threading.Thread(target=run_first, daemon=True)
    thread.start()
    assert started.wait(TIMEOUT)

    ran_second = second.run_due()
    release.set()
    thread.join(TIMEOUT)

    assert ran_second == []
    assert ran_first == [["sweep"]]
    assert runs == ["slow"]
    # The lock is free again: the second runner's next round runs.
    assert second.run_due() == ["sweep"]


def test_the_runner_thread_runs_due_jobs_and_stops_when_told(monkeypatch):
    swept = threading.Event()
    monkeypatch.setattr(jobs, "MIN_PAUSE", 0.05)
    monkeypatch.setattr(jobs, "JITTER", 0.05)
    runner = jobs.Runner((jobs.Job("sweep", every=0.1, run=swept.set),))

    runner.start()
    assert swept.wait(TIMEOUT)
    started = time.monotonic()
    runner.stop()

    assert time.monotonic() - started < jobs.STOP_WAIT
    assert not runner._thread.is_alive()


def test_the_server_runs_the_bounce_sweep_and_the_hourly_retention_purge():
    assert [(job.name, job.every) for job in jobs.JOBS] == [
        ("notes_bounce", 10.0),
        ("retention_purge", 3600.0),
    ]
