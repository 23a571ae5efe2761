"""plumb's periodic jobs, run by the server itself: no cron for the operator to remember.

Each server process (``post_worker_init`` in ``plumb_site/gunicorn_config.py``)
starts one daemon thread, the :class:`Runner`, which wakes every few seconds
and runs the jobs that are due, each at its own interval (:data:`JOBS`).
Only one runner at a time runs jobs, across every process and host that
shares the database (``common.locks.held_alone``): the others find the lock
taken and try again at their next wake-up. Each process keeps its own
timetable, so with N processes a job may run up to N times per interval,
one run after another; every job is therefore idempotent, and cheap when
there is nothing to do (the bounce sweep: two small queries).

A job that fails is logged and tried again at its next time; a job never
stops the runner, and the runner never stops a request. The thread opens
its own database connection and closes it after each round.
"""

from __future__ import annotations

import atexit
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.db import connections

from common.locks import held_alone
from mailbox.services import notes_bounce
from rooms.services.retention import purge_run

logger = logging.getLogger("plumb.jobs")

LOCK = "jobs"
# Bounds of a runner's sleep between rounds, in seconds, and the random part
# added to it, so that the processes of a host do not all wake together.
MIN_PAUSE = 1.0
MAX_PAUSE = 10.0
JITTER = 2.0
# How long stopping waits for a round in progress to end.
STOP_WAIT = 5.0


@dataclass(frozen=True)
class Job:
    name: str
    every: float  # seconds between two runs
    run: Callable[[], object]


def _bounce() -> object:
    return notes_bounce()


def _purge() -> object:
    return purge_run()


# Every periodic job. The bounce sweep runs often enough that a note bounces
# within a minute of its time (SPEC §3.6); the retention purge hourly (SPEC §8),
# in short batches, so that traffic never queues long behind it.
JOBS: tuple[Job, ...] = (
    Job("notes_bounce", every=10.0, run=_bounce),
    Job("retention_purge", every=3600.0, run=_purge),
)


class Runner:
    """Runs due jobs, one runner at a time cluster-wide; ``start`` runs it in a thread."""

    def __init__(
        self, jobs: Sequence[Job] = JOBS, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.jobs = tuple(jobs)
        self._clock = clock
        # The first round comes a few seconds after start, at a random moment.
        start = clock() + random.uniform(MIN_PAUSE, MIN_PAUSE + JITTER)
        self._due = {job.name: start for job in self.jobs}
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def run_due(self) -> list[str]:
        """Run every due job if no other runner is running jobs; the names of those run."""
        now = self._clock()
        due = [job for job in self.jobs if self._due[job.name] <= now]
        if not due:
            return []
        ran = []
        with held_alone(LOCK) as held:
            if not held:
                return []  # another runner is at it; try again next round
            for job in due:
                started = self._clock()
                try:
                    result = job.run()
                except Exception:
                    logger.exception("job %s failed", job.name)
                else:
                    logger.debug("job %s: %s", job.name, result)
                self._due[job.name] = started + job.every
                ran.append(job.name)
        return ran

    def pause(self) -> float:
        """Seconds until the next job is due, within bounds, with a random part."""
        until = min(self._due.values(), default=self._clock() + MAX_PAUSE) - self._clock()
        return min(max(until, MIN_PAUSE), MAX_PAUSE) + random.uniform(0, JITTER)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="plumb-jobs", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(STOP_WAIT)

    def _loop(self) -> None:
        while not self._stopping.wait(self.pause()):
            try:
                self.run_due()
            except Exception:  # the database is down, say: next round
                logger.exception("periodic jobs failed")
            finally:
                connections.close_all()  # this thread's: no connection idles here


_runner: Runner | None = None
_runner_guard = threading.Lock()


def start() -> Runner:
    """Start this process's runner, once; it stops when the process exits."""
    global _runner
    with _runner_guard:
        if _runner is None:
            _runner = Runner()
            _runner.start()
            atexit.register(_runner.stop)
        return _runner
