"""gunicorn's settings for plumb: ``gunicorn -c python:plumb_site.gunicorn_config``.

``make serve``, ``bench/run.py`` and the scale tests' harness start gunicorn
with it; the address, processes and threads stay on their command lines. It
runs in gunicorn's master process, before any worker starts:

* **The application and its worker.** ``plumb_site.asgi:application`` on
  gunicorn's ``asgi`` worker (``plumb_site/asgi_worker.py``: its own error
  answers in plumb's JSON shape): each process reads every connection on one
  event loop, and Django runs in ``PLUMB_THREADS`` threads behind it (see
  ``plumb_site/asgi.py`` for why). A process holds up to
  ``PLUMB_MAX_CONNECTIONS`` connections (plumb's worker enforces it;
  ``worker_connections`` is set to match), a connection gets
  ``PLUMB_HEADER_TIMEOUT`` seconds for each request head, and an idle
  keep-alive connection is closed after ``keepalive`` seconds. The event
  loop is uvloop's (``asgi_loop``): the loop's own work (reading, writing,
  timers, the hand-off to Django's threads) is a fair share of a small
  request's CPU, and libuv does it in C. gunicorn would fall back to
  asyncio's loop with a warning if uvloop were missing; it is pinned in
  ``requirements.txt``.

* **Metrics from every process.** prometheus-client decides when it is first
  imported whether values live in process memory or in files, so
  ``PROMETHEUS_MULTIPROC_DIR`` is set here (``PLUMB_METRICS_DIR``, i.e.
  ``var/metrics/``, unless the environment names another folder), and every
  worker inherits it. ``GET /metrics``, whichever worker answers, sums every
  worker's file. The folder is emptied at start, so an earlier run's counts
  never add up with this one's; a worker that exits takes its "live" gauges
  (waiting polls) with it, and leaves its counters to the totals.
* **JSON logs.** With ``LOG_FORMAT=json`` gunicorn's own lines (start,
  workers, errors, the access log) are JSON objects like plumb's, and each
  access line carries ``method``, ``path``, ``status`` and ``duration_ms``.
  Where the lines go (``--access-logfile``, ``--error-logfile``) is left as
  the command line says.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from gunicorn import glogging

from common.logs import JsonFormatter
from plumb_site import accept
from plumb_site.checks import sqlite_fts5_missing

try:
    from plumb_site import settings as plumb_settings
except ImproperlyConfigured as exc:
    # One line naming the variable and what it accepts, before any worker starts.
    sys.exit(f"plumb: {exc}")

# The master's hooks read Django's settings (plumb_site/listening.py).
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "plumb_site.settings")

# The search index needs SQLite's FTS5: said in one line, before any worker starts,
# rather than as the first search's error (plumb_site/checks.py).
if plumb_settings.DATABASES["default"]["ENGINE"] == "plumb_site.sqlite":
    _missing = sqlite_fts5_missing()
    if _missing is not None:
        sys.exit(f"plumb: {_missing}")

METRICS_DIR = Path(
    os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(plumb_settings.PLUMB_METRICS_DIR))
)


def on_starting(server: object) -> None:
    """Empty the metrics folder of an earlier run's files (only those: it may be shared);
    open the board on which the workers even out their connections (``plumb_site/accept.py``)."""
    METRICS_DIR.mkdir(parents=True, exist_ok=True)
    for stale in METRICS_DIR.glob("*.db"):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()
    accept.open_board()


def pre_fork(server, worker) -> None:
    """The worker about to be forked gets a slot of the board."""
    if accept.BOARD is not None:
        taken = (getattr(other, "plumb_slot", None) for other in server.WORKERS.values())
        worker.plumb_slot = accept.BOARD.claim(taken)


def when_ready(server) -> None:
    """Record where this server listens, for ``plumb connect`` (``plumb_site/listening.py``)."""
    from plumb_site import listening

    listening.record([listener.sock for listener in server.LISTENERS])


def on_exit(server: object) -> None:
    from plumb_site import listening

    listening.forget()


def child_exit(server: object, worker: object) -> None:
    """A worker is gone: its waiting polls wait no more, its connections are closed."""
    from prometheus_client import multiprocess  # imported once the folder is set

    multiprocess.mark_process_dead(worker.pid, path=str(METRICS_DIR))
    if accept.BOARD is not None:
        accept.BOARD.free(getattr(worker, "plumb_slot", None))


class _AccessFields(logging.Filter):
    """Copy the request's fields from gunicorn's access-log atoms onto the record."""

    def filter(self, record: logging.LogRecord) -> bool:
        atoms = record.args
        if isinstance(atoms, Mapping):
            status = str(atoms["s"])
            record.method = atoms["m"]
            record.path = atoms["U"]
            record.status = int(status) if status.isdigit() else status
            record.duration_ms = round(atoms["D"] / 1000, 3)  # D: microseconds
        return True


class _Atoms(Mapping):
    """gunicorn's access-log atoms as ``SafeAtoms`` gives them, each escaped when it is read.

    ``SafeAtoms`` copies every atom, every request and response header and every
    environ entry among them, escaping each text, before a line that reads a
    handful of them is formatted: over a quarter of the bytecodes of an access
    line, an eighth of its instructions (docs/internals.md). Keys, escaped
    values, the ``-`` that a missing atom formats as, ``get`` and ``in`` are
    ``SafeAtoms``' (``tests/plumb_site/test_access_log.py``).
    """

    __slots__ = ("_atoms",)

    def __init__(self, atoms: dict[str, Any]) -> None:
        self._atoms = atoms

    def __getitem__(self, key: str) -> Any:
        if key.startswith("{"):
            key = key.lower()
        try:
            value = self._atoms[key]
        except KeyError:
            return "-"
        return _escaped(value)

    def get(self, key: str, default: Any = None) -> Any:
        return _escaped(self._atoms[key]) if key in self._atoms else default

    def __contains__(self, key: object) -> bool:
        return key in self._atoms

    def __iter__(self) -> Iterator[str]:
        return iter(self._atoms)

    def __len__(self) -> int:
        return len(self._atoms)

    def __repr__(self) -> str:
        # As SafeAtoms (a dict) shows in logging's report of a line it could not write.
        return repr(dict(self))


class _RequestAtoms(Mapping):
    """gunicorn's ``atoms()`` of one request, each worked out when it is read.

    gunicorn builds every atom of a request for each access line: the
    nineteen one-letter ones, and one for each request header, response
    header and environ entry, in three loops, before a line that reads nine
    of them. Here a one-letter atom is made when the line reads it, as
    gunicorn makes it (``_LETTERS``); anything else (a header, an environ
    entry, the whole mapping) is gunicorn's own ``atoms()``, made once.
    ``tests/plumb_site/test_access_log.py`` holds every atom to gunicorn's.
    """

    __slots__ = ("_all", "_logger", "_request")

    def __init__(self, logger: glogging.Logger, *request: Any) -> None:
        self._logger = logger
        self._request = request  # resp, req, environ, request_time
        self._all: dict[str, Any] | None = None

    def _whole(self) -> dict[str, Any]:
        if self._all is None:
            self._all = glogging.Logger.atoms(self._logger, *self._request)
        return self._all

    def __getitem__(self, key: str) -> Any:
        make = _LETTERS.get(key)
        if make is None:
            return self._whole()[key]
        resp, _, environ, request_time = self._request
        return make(self._logger, resp, environ, request_time)

    def __contains__(self, key: object) -> bool:
        return key in _LETTERS or key in self._whole()

    def __iter__(self) -> Iterator[str]:
        return iter(self._whole())

    def __len__(self) -> int:
        return len(self._whole())


def _status(resp: Any) -> Any:
    status = resp.status
    return status.split(None, 1)[0] if isinstance(status, str) else status


def _sent(resp: Any) -> Any:
    return getattr(resp, "sent", None)


# gunicorn 27's glogging.Logger.atoms, one letter at a time.
_LETTERS: dict[str, Callable[[Any, Any, Any, Any], Any]] = {
    "h": lambda logger, resp, environ, t: environ.get("REMOTE_ADDR", "-"),
    "l": lambda logger, resp, environ, t: "-",
    "u": lambda logger, resp, environ, t: logger._get_user(environ) or "-",
    "t": lambda logger, resp, environ, t: logger.now(),
    "r": lambda logger, resp, environ, t: (
        "%s %s %s"  # noqa: UP031 - as gunicorn writes it
        % (environ["REQUEST_METHOD"], environ["RAW_URI"], environ["SERVER_PROTOCOL"])
    ),
    "s": lambda logger, resp, environ, t: _status(resp),
    "m": lambda logger, resp, environ, t: environ.get("REQUEST_METHOD"),
    "U": lambda logger, resp, environ, t: environ.get("PATH_INFO"),
    "q": lambda logger, resp, environ, t: environ.get("QUERY_STRING"),
    "H": lambda logger, resp, environ, t: environ.get("SERVER_PROTOCOL"),
    "b": lambda logger, resp, environ, t: (_sent(resp) is not None and str(resp.sent)) or "-",
    "B": lambda logger, resp, environ, t: _sent(resp),
    "f": lambda logger, resp, environ, t: environ.get("HTTP_REFERER", "-"),
    "a": lambda logger, resp, environ, t: environ.get("HTTP_USER_AGENT", "-"),
    "T": lambda logger, resp, environ, t: t.seconds,
    "D": lambda logger, resp, environ, t: (t.seconds * 1000000) + t.microseconds,
    "M": lambda logger, resp, environ, t: (t.seconds * 1000) + int(t.microseconds / 1000),
    "L": lambda logger, resp, environ, t: "%d.%06d" % (t.seconds, t.microseconds),  # noqa: UP031
    "p": lambda logger, resp, environ, t: "<%s>" % os.getpid(),  # noqa: UP031
}


def _escaped(value: Any) -> Any:
    return value.replace('"', '\\"') if isinstance(value, str) else value


class Logger(glogging.Logger):
    """gunicorn's logger, writing through plumb's JSON formatter when LOG_FORMAT=json.

    An access line goes straight to its handler's stream while the access log
    is as gunicorn set it up (``_plain_access_handler``): the line, its
    newline and a flush, under the handler's lock, are all that ``logging``
    would do with it, and making a ``LogRecord`` (the caller's frame, the
    thread, the process id) and handing it through the logger, its handler
    and formatter is two thirds of an access line's bytecodes. Anything
    else (JSON lines, a filter, another handler or formatter, a level or
    ``logging.disable`` that holds the line back) goes through ``logging``
    (``tests/plumb_site/test_access_log.py`` writes both ways).
    """

    atoms_wrapper_class = _Atoms

    def atoms(self, resp: Any, req: Any, environ: Any, request_time: Any) -> Mapping[str, Any]:
        return _RequestAtoms(self, resp, req, environ, request_time)

    def access(self, resp: Any, req: Any, environ: Any, request_time: Any) -> None:
        handler = self._plain_access_handler()
        if handler is None:
            super().access(resp, req, environ, request_time)
            return
        atoms = self.atoms_wrapper_class(self.atoms(resp, req, environ, request_time))
        try:
            line = self.cfg.access_log_format % atoms
        except Exception:
            # logging's own account of a line it cannot format
            super().access(resp, req, environ, request_time)
            return
        handler.acquire()
        try:
            handler.stream.write(line + handler.terminator)
            handler.stream.flush()
        except Exception:
            log = self.access_log
            record = log.makeRecord(
                log.name, logging.INFO, "", 0, self.cfg.access_log_format, (atoms,), None
            )
            handler.handleError(record)
        finally:
            handler.release()

    def _plain_access_handler(self) -> logging.StreamHandler | None:
        """The access log's one handler, if ``logging`` would only write the line to its stream."""
        log = self.access_log
        handlers = log.handlers
        if (
            not self.access_log_enabled
            or len(handlers) != 1
            or log.filters
            or log.propagate
            or not log.isEnabledFor(logging.INFO)
        ):
            return None
        handler = handlers[0]
        if (
            type(handler) not in (logging.StreamHandler, logging.FileHandler)
            or handler.filters
            or handler.level > logging.INFO
            or handler.stream is None
        ):
            return None
        formatter = handler.formatter
        if (
            type(formatter) is not logging.Formatter
            or type(formatter._style) is not logging.PercentStyle
            or formatter._style._fmt != self.access_fmt
            or formatter._style._defaults
        ):
            return None
        return handler

    def setup(self, cfg: object) -> None:
        super().setup(cfg)
        if plumb_settings.LOG_FORMAT != "json":
            return
        formatter = JsonFormatter()
        for log in (self.error_log, self.access_log):
            for handler in log.handlers:
                handler.setFormatter(formatter)
        if not any(isinstance(f, _AccessFields) for f in self.access_log.filters):
            self.access_log.addFilter(_AccessFields())


logger_class = Logger
wsgi_app = "plumb_site.asgi:application"
worker_class = "plumb_site.asgi_worker.Worker"
asgi_loop = "uvloop"
# gunicorn's own parser, named: plumb_site/asgi_worker.py's header timeout and cap hook into
# the protocol's parsing callbacks, and the tests pin them on this parser. gunicorn_h1c
# (0.6.10 builds from its sdist here) is not taken anyway: gunicorn 27 caches whether it is
# installed on the protocol's class but reads the answer from ASGIProtocol, so a subclass
# such as plumb's never gets it ("fast" refuses to start). Forced past that, it saved about
# a twentieth of a GET's server CPU and nothing of a send's (docs/internals.md).
http_parser = "python"
worker_connections = plumb_settings.PLUMB_MAX_CONNECTIONS
keepalive = 30
# A request whose client left runs on in its thread all the same (a waiting
# poll for up to 30 s): the worker waits for it rather than cancel it at 3 s
# and log it as its own 500.
asgi_disconnect_grace_period = 35


def post_worker_init(worker: object) -> None:
    """Each worker runs plumb's periodic jobs (bounces), one runner at a time across
    processes and hosts (``plumb_site/jobs.py``)."""
    from plumb_site import jobs  # Django is set up by now: the worker loaded the app

    jobs.start()
