"""Throwaway PostgreSQL and Redis servers for tests that need one the run lacks.

A test that needs PostgreSQL or Redis starts a throwaway one itself, so that
``make test`` on SQLite runs it too rather than skipping it. Both come from
the scripts a person uses (``scripts/with-postgres``, ``scripts/with-redis``:
free loopback port, installing Debian's package as root when missing, and
removing everything afterwards), run around a tiny process that prints the
URL the script exported and then waits for its standard input to close.
Closing it (or this process dying, which closes it too) ends the script's
command, and the script then stops its server and deletes its files.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
READY_TIMEOUT = 600  # seconds: the first run may install the package
STOP_TIMEOUT = 60

# Runs under the script: hands the URL over, then holds the server until told.
_HOLD = "import os, sys; print(os.environ[sys.argv[1]], flush=True); sys.stdin.read()"


@contextlib.contextmanager
def around_script(script: str, variable: str) -> Iterator[str]:
    """Run ``scripts/<script>`` until the block ends; yields the ``variable`` it exported."""
    process = subprocess.Popen(
        [str(SCRIPTS / script), sys.executable, "-c", _HOLD, variable],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        # A session of its own: if the holder is not told to stop by its input
        # closing (some other process of this run still holds the pipe), the
        # whole session is signalled, the holder dies, and the script's trap
        # stops its server (bash runs a trap only once its foreground child ends).
        start_new_session=True,
    )
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            if not selector.select(READY_TIMEOUT):
                raise RuntimeError(f"{script} printed no {variable} within {READY_TIMEOUT} s")
        url = process.stdout.readline().strip()
        if not url:
            raise RuntimeError(f"{script} exited with {process.wait()} before starting")
        yield url
    finally:
        process.stdin.close()
        try:
            process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGTERM)  # the script's trap still cleans up
            try:
                process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=STOP_TIMEOUT)
        process.stdout.close()


@contextlib.contextmanager
def redis_url() -> Iterator[str]:
    """``REDIS_URL`` when the run has one (``scripts/with-redis``), else a throwaway server."""
    if os.environ.get("REDIS_URL"):
        yield os.environ["REDIS_URL"]
        return
    with around_script("with-redis", "REDIS_URL") as url:
        yield url


@contextlib.contextmanager
def postgres_cluster() -> Iterator[str]:
    """A URL of a throwaway PostgreSQL cluster's database ``plumb``."""
    with around_script("with-postgres", "DATABASE_URL") as url:
        yield url


def interrupted_report(command: list[str], sent: int, status: int) -> dict:
    """Run a script's probe in a session of its own, signal the whole session
    once the probe has reported (as a terminal's Ctrl-C or a CI runner's
    timeout does), check the script exits with ``status``; the probe's report."""
    run = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        report = json.loads(run.stdout.readline())
        os.killpg(run.pid, sent)
        assert run.wait(timeout=60) == status
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
        run.stdout.close()
    return report
