"""gunicorn's access line through plumb's logger: the atoms escaped as they are read.

``plumb_site.gunicorn_config._Atoms`` stands in for gunicorn's ``SafeAtoms``;
every line, key and value must be what ``SafeAtoms`` gives.
"""

from __future__ import annotations

import datetime
import importlib
import logging
import os
import re

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
    ``gunicorn.access`` loggers (handlers, level, no propagation), and tests here
    change them (filters, disabled): put them back."""
    kept = []
    for name in ("gunicorn.error", "gunicorn.access"):
        log = logging.getLogger(name)
        kept.append(
            (log, list(log.handlers), log.level, log.propagate, list(log.filters), log.disabled)
        )
    yield
    for log, handlers, level, propagate, filters, disabled in kept:
        for handler in log.handlers:
            if handler not in handlers:
                handler.close()
        log.handlers[:] = handlers
        log.setLevel(level)
        log.propagate = propagate
        log.filters[:] = filters
        log.disabled = disabled


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
    assert repr(ours) == repr(theirs)
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


# The access line written straight to the handler's stream (Logger.access) is the
# line logging writes, and anything but gunicorn's own set-up goes through logging.

_PLAIN_FORMAT = '%(h)s %(l)s %(u)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s" %(M)s'


def _access(logger: glogging.Logger, path: str = "/x") -> None:
    environ = {
        "REQUEST_METHOD": "GET",
        "RAW_URI": path,
        "SERVER_PROTOCOL": "HTTP/1.1",
        "HTTP_USER_AGENT": 'a "b"',
    }
    response = ASGIResponseInfo(200, [(b"Content-Length", b"2")], 2)
    logger.access(response, _Request(), environ, datetime.timedelta(microseconds=1500))


def _made(cls, accesslog: str, fmt: str = _PLAIN_FORMAT) -> glogging.Logger:
    cfg = Config()
    cfg.set("accesslog", accesslog)
    cfg.set("access_log_format", fmt)
    return cls(cfg)


@pytest.fixture
def records(monkeypatch):
    """Every LogRecord the access logger makes."""
    made = []
    real = logging.Logger.makeRecord

    def counted(self, *args, **kwargs):
        record = real(self, *args, **kwargs)
        if self.name == "gunicorn.access":
            made.append(record)
        return record

    monkeypatch.setattr(logging.Logger, "makeRecord", counted)
    return made


def test_a_plain_access_log_is_written_straight_and_as_logging_writes_it(tmp_path, records):
    written = {}
    for cls in (Logger, glogging.Logger):
        path = tmp_path / f"{cls.__module__}.log"
        logger = _made(cls, str(path))
        for n in range(3):
            _access(logger, f"/x/{n}")
        written[cls] = path.read_text()  # flushed with each line: nothing is held back

    assert written[Logger] == written[glogging.Logger]
    assert written[Logger].count("\n") == 3
    assert 'GET /x/1 HTTP/1.1" 200 2 "-" "a \\"b\\"" 1\n' in written[Logger]
    assert len(records) == 3  # gunicorn's logger's three; plumb's made none


def test_a_plain_access_log_on_standard_output_is_written_there(monkeypatch, records):
    import io

    out = io.StringIO()
    monkeypatch.setattr("sys.stdout", out)
    logger = _made(Logger, "-")

    _access(logger)

    assert out.getvalue().endswith('"GET /x HTTP/1.1" 200 2 "-" "a \\"b\\"" 1\n')
    assert records == []


def _pass(record):
    return True


_CHANGES = {
    "a filter on the logger": lambda log, handler: log.addFilter(_pass),
    "a filter on the handler": lambda log, handler: handler.addFilter(_pass),
    "a second handler": lambda log, handler: log.addHandler(logging.NullHandler()),
    "propagation": lambda log, handler: setattr(log, "propagate", True),
    "a handler above INFO": lambda log, handler: handler.setLevel(logging.WARNING),
    "the logger above INFO": lambda log, handler: log.setLevel(logging.WARNING),
    "the logger disabled": lambda log, handler: setattr(log, "disabled", True),
    "another format": lambda log, handler: handler.setFormatter(logging.Formatter("> %(message)s")),
    "a formatter of its own": lambda log, handler: handler.setFormatter(
        type("Upper", (logging.Formatter,), {"format": lambda self, r: r.getMessage().upper()})()
    ),
    "plumb's JSON lines": lambda log, handler: handler.setFormatter(_config.JsonFormatter()),
    "a handler of its own": lambda log, handler: setattr(
        handler, "__class__", type("Own", (logging.FileHandler,), {})
    ),
}


@pytest.mark.parametrize("change", list(_CHANGES), ids=list(_CHANGES))
def test_an_access_log_set_up_otherwise_goes_through_logging(tmp_path, change, records):
    written = {}
    for cls in (Logger, glogging.Logger):
        path = tmp_path / f"{cls.__module__}.log"
        logger = _made(cls, str(path))
        _CHANGES[change](logger.access_log, logger._get_gunicorn_handler(logger.access_log))
        records.clear()
        _access(logger)
        # A JSON line's time is the record's, which may move a millisecond between the two.
        text = re.sub(r'"time": "[^"]*"', '"time": "-"', path.read_text())
        written[cls] = (text, len(records))
        if cls is Logger:
            assert logger._plain_access_handler() is None

    assert written[Logger] == written[glogging.Logger]


def test_nothing_is_written_while_logging_is_disabled_for_info(tmp_path):
    path = tmp_path / "access.log"
    logger = _made(Logger, str(path))
    logging.disable(logging.INFO)
    try:
        _access(logger)
    finally:
        logging.disable(logging.NOTSET)
    _access(logger, "/after")

    assert "/x " not in path.read_text()
    assert "/after " in path.read_text()


def test_a_reopened_file_takes_the_next_lines(tmp_path):
    path = tmp_path / "access.log"
    logger = _made(Logger, str(path))
    _access(logger, "/before")
    path.rename(tmp_path / "access.log.1")  # as logrotate moves it, before USR1

    logger.reopen_files()
    _access(logger, "/after")

    assert "/before " in (tmp_path / "access.log.1").read_text()
    assert "/after " in path.read_text()
    assert "/before " not in path.read_text()


class _Broken:
    def write(self, text):
        raise OSError("the pipe is gone")

    def flush(self):
        pass


@pytest.mark.parametrize(
    "fmt", [_PLAIN_FORMAT, "%(s)d %(a)d"], ids=["a write fails", "a format fails"]
)
def test_a_line_that_cannot_be_written_is_reported_as_logging_reports_it(fmt, capsys, monkeypatch):
    monkeypatch.setattr(logging, "raiseExceptions", True)
    reports = {}
    for cls in (Logger, glogging.Logger):
        logger = _made(cls, "-", fmt)
        logger.access_log.handlers[0].stream = _Broken()
        _access(logger)
        reports[cls] = capsys.readouterr().err

    assert "--- Logging error ---" in reports[Logger]
    for report in reports.values():
        assert report.count("--- Logging error ---") == 1
    # The record's message and arguments, the time among them.
    last = {
        cls: re.sub(r"\[\d+/\w+/[^]]*\]", "[-]", report.strip().splitlines()[-1])
        for cls, report in reports.items()
    }
    assert last[Logger] == last[glogging.Logger]


# plumb's atoms(): each one-letter atom made when read, as gunicorn makes it.

_RequestAtoms = _config._RequestAtoms


def _requests():
    """Requests as the worker logs them, and some it does not make (a text status, no sent)."""
    basic = {"HTTP_AUTHORIZATION": "Basic dXNlcjpwYXNz"}  # user:pass
    for status, sent, extra in [
        (201, 429, {}),
        (200, None, basic),
        ("404 Not Found", 0, {"HTTP_REFERER": 'http://x/"y"'}),
        (499, 0, {"REMOTE_ADDR": "::1", "QUERY_STRING": "a=1&b=2"}),
    ]:
        environ = {
            "REQUEST_METHOD": "GET",
            "RAW_URI": "/x?a=1",
            "PATH_INFO": "/x",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "HTTP_USER_AGENT": 'agent "q"',
            **extra,
        }
        response = ASGIResponseInfo(status, [(b"Content-Type", b"application/json")], 0)
        if sent is None:
            del response.sent
        else:
            response.sent = sent
        yield response, _Request(), environ, _RequestTime(1.234567)


@pytest.fixture
def fixed_time(monkeypatch):
    monkeypatch.setattr(glogging.Logger, "now", lambda self: "[03/Dec/2026:12:00:00 +0000]")


@pytest.mark.parametrize("request_", list(_requests()), ids=["201", "basic", "text", "499"])
def test_every_atom_is_gunicorns(fixed_time, request_):
    ours = Logger(Config()).atoms(*request_)
    theirs = glogging.Logger(Config()).atoms(*request_)

    assert isinstance(ours, _RequestAtoms)
    for key in "hlutrsmUqHbBfaTDMLp":  # made one at a time, before the whole is asked for
        assert ours[key] == theirs[key], key
        assert key in ours
    assert ours._all is None
    for key in theirs:
        assert ours[key] == theirs[key], key
    assert dict(ours) == theirs
    assert len(ours) == len(theirs)
    for missing in ("x", "{nothing}i", "{user-agent}I"):
        assert missing not in ours
        with pytest.raises(KeyError):
            ours[missing]


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_writes_what_gunicorn_writes(fixed_time, fmt):
    for request_ in _requests():
        ours = _Atoms(Logger(Config()).atoms(*request_))
        theirs = glogging.SafeAtoms(glogging.Logger(Config()).atoms(*request_))
        assert fmt % ours == fmt % theirs


def test_a_line_of_one_letter_atoms_makes_no_whole_atoms(tmp_path, monkeypatch):
    made = []
    whole = glogging.Logger.atoms
    monkeypatch.setattr(
        glogging.Logger, "atoms", lambda self, *a: made.append(1) or whole(self, *a)
    )
    logger = _made(Logger, str(tmp_path / "access.log"), Config().access_log_format)

    _access(logger)
    assert made == []

    logger.cfg.set("access_log_format", "%(h)s %({user-agent}i)s")
    _access(logger)
    assert made == [1]
    # The request's own header (gunicorn reads {...}i from the request, not the environ).
    assert (tmp_path / "access.log").read_text().endswith('- agent \\"quoted\\" 1.0\n')
