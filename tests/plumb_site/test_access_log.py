"""gunicorn's access line through plumb's logger: the atoms escaped as they are read.

``plumb_site.gunicorn_config._Atoms`` stands in for gunicorn's ``SafeAtoms``;
every line, key and value must be what ``SafeAtoms`` gives.
"""

from __future__ import annotations

import datetime
import importlib
import logging
import os

import pytest
from gunicorn import glogging
from gunicorn.asgi.protocol import ASGIResponseInfo, _RequestTime
from gunicorn.config import Config


def _gunicorn_config():
    """plumb's gunicorn configuration, imported as gunicorn's master imports it, except
    that what it sets in the environment for the workers (PROMETHEUS_MULTIPROC_DIR) is
    taken back: it would move the rest of this process's metrics into files."""
    saved = dict(os.environ)
    try:
        return importlib.import_module("plumb_site.gunicorn_config")
    finally:
        os.environ.clear()
        os.environ.update(saved)


_config = _gunicorn_config()
Logger, _Atoms = _config.Logger, _config._Atoms


class _Request:
    method = "POST"
    uri = '/api/v1/rooms/r/messages/?q="x"'
    path = "/api/v1/rooms/r/messages/"
    query = 'q="x"'
    version = (1, 1)
    headers = [
        ("HOST", "127.0.0.1:8000"),
        ("USER-AGENT", 'agent "quoted" 1.0'),
        ("REFERER", "http://127.0.0.1/"),
        ("AUTHORIZATION", "Basic dXNlcjpwYXNz"),
        ("X-Request-Id", "abc"),
    ]


def _atoms(logger: glogging.Logger) -> dict:
    environ = {
        "REQUEST_METHOD": "POST",
        "RAW_URI": _Request.uri,
        "PATH_INFO": _Request.path,
        "QUERY_STRING": _Request.query,
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        **{"HTTP_" + name.replace("-", "_"): value for name, value in _Request.headers},
    }
    response = ASGIResponseInfo(
        201, [(b"Content-Type", b"application/json"), (b"Vary", b"Accept")], 429
    )
    return logger.atoms(response, _Request(), environ, _RequestTime(0.001234))


FORMATS = [
    Config().access_log_format,  # gunicorn's default
    "%(p)s %(s)s %(m)s %(U)s",  # tests/scale/harness.py
    '%(h)s "%(r)s" %(q)s %(H)s %(b)s %(B)s %(T)s %(D)s %(M)s %(L)s %(f)s "%(a)s" %(u)s',
    "%({user-agent}i)s %({USER-AGENT}i)s %({x-request-id}i)s %({missing}i)s",
    "%({content-type}o)s %({Vary}o)s %({remote_addr}e)s %({HTTP_HOST}e)s %(nothing)s",
]


@pytest.fixture(autouse=True)
def _gunicorns_loggers_as_they_were():
    """A gunicorn ``Logger`` sets up the process's ``gunicorn.error`` and
    ``gunicorn.access`` loggers (handlers, level, no propagation): put them back."""
    kept = []
    for name in ("gunicorn.error", "gunicorn.access"):
        log = logging.getLogger(name)
        kept.append((log, list(log.handlers), log.level, log.propagate))
    yield
    for log, handlers, level, propagate in kept:
        for handler in log.handlers:
            if handler not in handlers:
                handler.close()
        log.handlers[:] = handlers
        log.setLevel(level)
        log.propagate = propagate


@pytest.fixture
def logger() -> glogging.Logger:
    return glogging.Logger(Config())


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_writes_what_safe_atoms_writes(logger, fmt):
    atoms = _atoms(logger)
    assert fmt % _Atoms(atoms) == fmt % glogging.SafeAtoms(atoms)


def test_keys_values_get_and_in_are_safe_atoms(logger):
    atoms = _atoms(logger)
    ours, theirs = _Atoms(atoms), glogging.SafeAtoms(atoms)
    assert dict(ours) == dict(theirs)
    assert len(ours) == len(theirs)
    assert ours["a"] == 'agent \\"quoted\\" 1.0'  # escaped when read, as SafeAtoms stores it
    for key in ["s", "a", "{user-agent}i", "{USER-AGENT}i", "missing", "{missing}i"]:
        assert (key in ours) is (key in theirs)
        assert ours.get(key) == theirs.get(key)
        assert ours.get(key, "default") == theirs.get(key, "default")
        assert ours[key] == theirs[key]


def test_the_logger_hands_its_line_these_atoms(tmp_path):
    """gunicorn's ``access`` builds its atoms with ``atoms_wrapper_class``: plumb's is
    used, and the line in the file is gunicorn's own logger's, byte for byte."""
    lines = {}
    for cls in (Logger, glogging.Logger):
        path = tmp_path / f"{cls.__module__}.log"
        cfg = Config()
        cfg.set("accesslog", str(path))
        # gunicorn's default but the time, which may turn a second between the two.
        cfg.set("access_log_format", '%(h)s %(l)s %(u)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s"')
        logger = cls(cfg)
        seen = []
        handler = logging.Handler()
        handler.emit = lambda record, seen=seen: seen.append(record.args)
        logger.access_log.addHandler(handler)
        environ = {
            "REQUEST_METHOD": "GET",
            "RAW_URI": "/x",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "HTTP_REFERER": "http://127.0.0.1/",
            "HTTP_AUTHORIZATION": "Basic dXNlcjpwYXNz",
            "HTTP_USER_AGENT": 'a "b"',
        }
        response = ASGIResponseInfo(200, [(b"Content-Length", b"2")], 2)
        logger.access(response, _Request(), environ, datetime.timedelta(microseconds=1500))
        logger.access_log.removeHandler(handler)
        for h in logger.access_log.handlers:
            h.flush()
        lines[cls] = path.read_text()
        expected = _Atoms if cls is Logger else glogging.SafeAtoms
        assert [type(args) for args in seen] == [expected]
    assert lines[Logger] == lines[glogging.Logger]
    assert lines[Logger] == '- - user "GET /x HTTP/1.1" 200 2 "http://127.0.0.1/" "a \\"b\\""\n'
