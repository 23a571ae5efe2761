"""The asgi worker's own rules (plumb_site/asgi_worker.py), without a server.

Which connection makes room past the cap, the bounded log, the file limit,
the 499 of the access log, the header checks, and the gunicorn names the
worker builds on.
``tests/scale/test_connections.py`` and ``test_slow_clients.py`` show the
same against a real server.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import resource
from types import SimpleNamespace

import pytest
from gunicorn.asgi import parser
from gunicorn.asgi import protocol as gprotocol
from gunicorn.asgi.protocol import ASGIProtocol
from gunicorn.config import Config
from gunicorn.workers import gasgi
from hypothesis import given
from hypothesis import strategies as st

from common.logs import BoundedLog
from plumb_site import asgi_worker
from plumb_site.accept import Board
from plumb_site.asgi_worker import SHED_SCAN, Connections, PlumbProtocol, fit_file_limit


class Count:
    """Stands for a gauge or a counter's child."""

    def __init__(self) -> None:
        self.value = 0

    def inc(self) -> None:
        self.value += 1

    def dec(self) -> None:
        self.value -= 1


class Counter:
    def __init__(self) -> None:
        self.children: dict[str, Count] = {}

    def labels(self, reason: str) -> Count:
        return self.children.setdefault(reason, Count())


class Connection:
    def __init__(self, name: str, *, unread: bool = False) -> None:
        self.name = name
        self.unread = unread
        self.shed_count = 0

    def has_unread(self) -> bool:
        return self.unread

    def shed(self) -> None:
        self.shed_count += 1

    def __repr__(self) -> str:
        return self.name


def connections(limit: int) -> tuple[Connections, Count]:
    gauge = Count()
    return Connections(limit, open_gauge=gauge, closed_counter=Counter()), gauge


def test_past_the_cap_the_connection_that_waited_longest_for_a_head_makes_room():
    held, gauge = connections(3)
    first, second, third, fourth = (Connection(name) for name in ("1", "2", "3", "4"))
    for connection in (first, second, third):
        assert held.admit(connection)

    assert held.admit(fourth)

    assert (first.shed_count, second.shed_count) == (1, 0)
    assert len(held) == 3
    assert gauge.value == 3


def test_a_connection_with_a_request_under_way_is_never_shed():
    held, _ = connections(2)
    serving, idle, new = Connection("serving"), Connection("idle"), Connection("new")
    held.admit(serving)
    held.admit(idle)
    held.busy(serving)

    assert held.admit(new)

    assert (serving.shed_count, idle.shed_count) == (0, 1)


def test_when_every_connection_held_is_busy_the_newcomer_is_refused():
    held, gauge = connections(2)
    for name in ("a", "b"):
        connection = Connection(name)
        held.admit(connection)
        held.busy(connection)

    assert not held.admit(Connection("c"))
    assert len(held) == 2
    assert gauge.value == 2


def test_a_connection_idle_again_after_its_answer_goes_to_the_back_of_the_line():
    held, _ = connections(2)
    kept_alive, silent = Connection("kept-alive"), Connection("silent")
    held.admit(kept_alive)
    held.admit(silent)
    held.busy(kept_alive)
    held.waiting(kept_alive)  # its answer is out

    held.admit(Connection("new"))

    assert (kept_alive.shed_count, silent.shed_count) == (0, 1)


def test_a_head_not_yet_read_keeps_its_connection():
    held, _ = connections(2)
    arriving, silent = Connection("arriving", unread=True), Connection("silent")
    held.admit(arriving)
    held.admit(silent)

    held.admit(Connection("new"))

    assert (arriving.shed_count, silent.shed_count) == (0, 1)


def test_past_so_many_heads_not_yet_read_the_newcomer_is_refused():
    held, _ = connections(SHED_SCAN + 1)
    arriving = [Connection(str(i), unread=True) for i in range(SHED_SCAN)]
    for connection in [*arriving, Connection("silent, but newer than all of them")]:
        held.admit(connection)

    assert not held.admit(Connection("new"))
    assert sum(connection.shed_count for connection in arriving) == 0


def test_a_released_connection_frees_its_place_once():
    held, gauge = connections(1)
    gone = Connection("gone")
    held.admit(gone)
    held.busy(gone)

    held.release(gone)
    held.release(gone)  # connection_lost after the worker let it go

    assert held.admit(Connection("next"))
    assert gauge.value == 1
    assert gone.shed_count == 0


def test_a_connection_leaves_the_board_when_released_shed_or_refused():
    board = Board(slots=2)
    seat = board.seat(board.claim([]))
    held = Connections(2, open_gauge=Count(), closed_counter=Counter(), seat=seat)
    first, second, third, fourth = (Connection(name) for name in ("1", "2", "3", "4"))
    for _ in range(4):
        seat.opened()  # each counted from its accept (plumb_site/accept.py)
    held.admit(first)
    held.admit(second)
    held.busy(second)
    held.admit(third)  # the oldest idle one (first) makes room
    assert board.read(0)[1] == 3
    held.busy(third)
    assert not held.admit(fourth)  # every one held is busy: refused
    assert board.read(0)[1] == 2
    held.release(second)
    held.release(second)  # connection_lost after the worker let it go
    held.release(first)  # connection_lost of the one shed
    assert board.read(0)[1] == 1


def test_connections_closed_are_counted_by_reason():
    counter = Counter()
    held = Connections(1, open_gauge=Count(), closed_counter=counter)

    held.count_closed("shed")
    held.count_closed("shed")
    held.count_closed("header_timeout")

    assert {reason: child.value for reason, child in counter.children.items()} == {
        "header_timeout": 1,
        "shed": 2,
        "refused": 0,
    }


# --- a bounded log ---------------------------------------------------------------------------


def test_a_bounded_log_writes_one_line_per_interval_and_counts_the_rest():
    written: list[str] = []
    now = [100.0]
    log = BoundedLog(lambda message, *args: written.append(message % args), clock=lambda: now[0])

    for _ in range(1000):
        log("refused %s", "one")
    now[0] += 10
    log("refused %s", "another")

    assert written == [
        "refused one",
        "refused another (and 999 more like it in the last 10 s)",
    ]


# --- the open-file limit ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limits", "connections", "raised_to", "held"),
    [
        pytest.param((1024, 1_048_576), 2200, 2200 + asgi_worker.FILE_RESERVE, 2200, id="raised"),
        pytest.param((1024, 2048), 2200, 2048, 2048 - asgi_worker.FILE_RESERVE, id="hard-short"),
        pytest.param((65536, 65536), 2200, None, 2200, id="enough"),
    ],
)
def test_the_file_limit_is_raised_to_fit_the_cap_or_the_cap_lowered(
    monkeypatch, limits, connections, raised_to, held
):
    calls = []
    monkeypatch.setattr(resource, "getrlimit", lambda _which: limits)
    monkeypatch.setattr(resource, "setrlimit", lambda _which, values: calls.append(values))

    assert fit_file_limit(connections) == held
    assert calls == ([] if raised_to is None else [(raised_to, limits[1])])


# --- what gunicorn logs -------------------------------------------------------------------------


def access_logged(status: int, headers: list, closed: bool) -> int:
    logged = []
    gunicorn_log = SimpleNamespace(access=lambda resp, *_: logged.append(resp.status))
    connection = SimpleNamespace(_closed=closed)
    log = asgi_worker._ConnectionLog(gunicorn_log, connection)

    log.access(SimpleNamespace(status=status, headers=headers), None, {}, None)

    return logged[0]


def test_a_request_whose_client_left_unanswered_is_logged_499():
    assert access_logged(500, [], closed=True) == 499


@pytest.mark.parametrize(
    ("status", "headers", "closed"),
    [
        pytest.param(500, [], False, id="the-application-answered-nothing"),
        pytest.param(500, [("content-type", "application/json")], True, id="a-500-it-sent"),
        pytest.param(200, [("content-type", "application/json")], True, id="answered-then-gone"),
    ],
)
def test_any_other_request_is_logged_as_it_was_answered(status, headers, closed):
    assert access_logged(status, headers, closed) == status


def test_gunicorns_own_refusals_are_written_in_the_json_shape():
    written = []
    connection = PlumbProtocol.__new__(PlumbProtocol)
    connection._safe_write = written.append

    connection._send_error_response(503, "Every connection held is busy.", [("Retry-After", "1")])

    head, _, body = written[0].partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == b"HTTP/1.1 503 Service Unavailable"
    assert b"Retry-After: 1" in head.split(b"\r\n")
    assert json.loads(body) == {
        "error": {
            "code": "too_many_connections",
            "message": asgi_worker.MESSAGES[503],
            "details": {"reason": "Every connection held is busy."},
        }
    }


# --- header checks -----------------------------------------------------------------------------

# Every byte, weighted to the edges of what gunicorn lets through.
EDGES = [0x00, 0x08, 0x09, 0x0A, 0x1F, 0x20, 0x21, 0x22, 0x2C, 0x7E, 0x7F, 0x80, 0xFF]
HEADER_BYTES = st.binary(max_size=64) | st.lists(st.sampled_from(EDGES), max_size=16).map(bytes)


@given(HEADER_BYTES)
def test_a_token_is_checked_as_gunicorn_checks_it(data):
    gunicorns = parser.PythonProtocol._is_valid_token(None, data)
    assert asgi_worker._Parser._is_valid_token(data) is gunicorns


@given(HEADER_BYTES)
def test_a_header_value_is_checked_as_gunicorn_checks_it(value):
    gunicorns = parser.PythonProtocol._has_invalid_header_chars(None, value)
    assert asgi_worker._Parser._has_invalid_header_chars(value) is gunicorns


def test_every_single_byte_is_checked_as_gunicorn_checks_it():
    for c in range(256):
        one = bytes([c])
        assert asgi_worker._Parser._is_valid_token(one) is parser.PythonProtocol._is_valid_token(
            None, one
        ), c
        assert asgi_worker._Parser._has_invalid_header_chars(
            one
        ) is parser.PythonProtocol._has_invalid_header_chars(None, one), c
    assert asgi_worker._Parser._is_valid_token(b"") is False


def _connection_parser() -> parser.PythonProtocol:
    connection = PlumbProtocol.__new__(PlumbProtocol)
    connection.cfg = Config()
    connection.cfg.set("http_parser", "python")  # as plumb_site/gunicorn_config.py names it
    connection._is_ssl = False
    connection._setup_callback_parser()
    return connection._callback_parser


def test_a_connections_parser_is_gunicorns_with_the_checks_in_c():
    assert type(_connection_parser()) is asgi_worker._Parser


@pytest.mark.parametrize(
    ("head", "error"),
    [
        (b"GET / HTTP/1.1\r\nHost: a\r\nX-Bad: a\x01b\r\n\r\n", parser.InvalidHeader),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX-Bad: a\x7fb\r\n\r\n", parser.InvalidHeader),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX(Bad): b\r\n\r\n", parser.InvalidHeaderName),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX-Bad : b\r\n\r\n", parser.InvalidHeaderName),
        (b"GE(T / HTTP/1.1\r\nHost: a\r\n\r\n", parser.InvalidRequestMethod),
    ],
)
def test_a_head_with_a_bad_name_or_value_is_refused(head, error):
    with pytest.raises(error):
        _connection_parser().feed(head)


def test_a_head_with_tabs_and_obs_text_in_its_values_is_read():
    connection_parser = _connection_parser()
    connection_parser._on_headers_complete = None  # no connection behind it here
    connection_parser._on_message_complete = None
    connection_parser.feed(b"GET / HTTP/1.1\r\nHost: a\r\nX-Ok: a\tb \xe9\r\n\r\n")
    assert connection_parser.headers == [(b"host", b"a"), (b"x-ok", b"a\tb \xe9")]


# A head's lines: mostly well formed, with every way gunicorn refuses one mixed in.
NAMES = st.sampled_from([b"Host", b"Content-Type", b"X-Ok", b"content-length", b"A"]) | HEADER_BYTES
VALUES = st.sampled_from([b"a", b"", b" spaced\t", b"5", b"chunked", b"x" * 50]) | HEADER_BYTES
LINES = st.one_of(
    st.tuples(NAMES, VALUES).map(lambda nv: nv[0] + b": " + nv[1]),
    st.tuples(NAMES, VALUES).map(lambda nv: nv[0] + b":" + nv[1]),
    HEADER_BYTES,
    st.sampled_from([b"No-Colon", b" Folded: a", b"Bare: a\nb", b"Cr: a\rb", b"X :a"]),
    # About as long as a line may be (FIELD_SIZE with its CRLF).
    st.integers(min_value=42, max_value=50).map(lambda n: b"X-Long: " + b"v" * (n - 8)),
)
FIELD_SIZE = 48


def _parsed(parser_class: type, pieces: list[bytes]) -> tuple:
    """What a parser makes of ``pieces`` fed in turn: its error, or what it read."""
    seen: list[tuple[bytes, bytes]] = []
    read = parser_class(
        on_header=lambda name, value: seen.append((name, value)),
        limit_request_fields=6,
        limit_request_field_size=FIELD_SIZE,
    )
    try:
        for piece in pieces:
            read.feed(piece)
    except parser.ParseError as error:
        return ("refused", type(error), str(error), seen)
    return (
        "read",
        seen,
        read.headers,
        read._state,
        read.method,
        read.path,
        read.content_length,
        read.is_chunked,
        read.should_keep_alive,
        read.is_complete,
        bytes(read._buffer),
    )


@given(
    st.lists(LINES, max_size=8),
    st.binary(max_size=8),
    st.integers(min_value=0, max_value=400),
)
def test_a_head_is_read_as_gunicorn_reads_it_whole_or_in_pieces(lines, after, cut):
    request = b"POST /x HTTP/1.1\r\n" + b"".join(line + b"\r\n" for line in lines)
    request += b"\r\n" + after
    cut = min(cut, len(request))
    for pieces in ([request], [request[:cut], request[cut:]]):
        assert _parsed(asgi_worker._Parser, pieces) == _parsed(parser.PythonProtocol, pieces)


@pytest.mark.parametrize(
    "lines",
    [
        [b"X-Long: " + b"v" * (FIELD_SIZE - 2 - 8)],  # as long as a line may be
        [b"X-Long: " + b"v" * (FIELD_SIZE - 1 - 8)],  # a byte longer
        [b"A: %d" % i for i in range(6)],  # as many headers as a head may have
        [b"A: %d" % i for i in range(7)],  # one more
        [b"Host: a", b"Bare: a\nb"],
        [b"Host: a", b"No-Colon"],
        [b"Host: a", b" Folded: a"],
        [b"Host: a", b"X :a"],
        [b"Host: a", b"Cr: a\rb"],
        [b"Empty:", b"Spaced: \t a b \t", b"Content-Length: 2"],
    ],
)
def test_a_head_at_each_limit_is_read_as_gunicorn_reads_it_at_every_cut(lines):
    request = b"POST /x HTTP/1.1\r\n" + b"".join(line + b"\r\n" for line in lines) + b"\r\nok"
    for cut in range(len(request) + 1):
        pieces = [request[:cut], request[cut:]]
        assert _parsed(asgi_worker._Parser, pieces) == _parsed(parser.PythonProtocol, pieces), cut


def test_a_whole_head_is_read_in_one_pass():
    pieces = [b"GET / HTTP/1.1\r\nHost: a\r\nX-Ok: b \r\n\r\n"]
    calls = []
    original = parser.PythonProtocol._parse_headers

    def counted(self):
        calls.append(self)
        return original(self)

    parser.PythonProtocol._parse_headers = counted
    try:
        ours = _parsed(asgi_worker._Parser, pieces)
    finally:
        parser.PythonProtocol._parse_headers = original
    assert ours[1] == [(b"host", b"a"), (b"x-ok", b"b")]
    assert calls == []  # gunicorn's line-by-line reading never ran


# --- answers -----------------------------------------------------------------------------------

ANSWER_NAMES = st.sampled_from(
    [b"content-type", b"allow", b"Date", b"server", b"Connection", b"transfer-encoding"]
) | st.sampled_from([b"set-cookie", b"content-length", "X-Text", b"bad name", b"x\r\ny"])
ANSWER_VALUES = st.sampled_from([b"application/json", b"a", b"", "t\u00e9xt", b"x\r\ny", b"5"])
ANSWER_HEADERS = st.lists(st.tuples(ANSWER_NAMES, ANSWER_VALUES), max_size=5)
LENGTHS = st.sampled_from([b"0", b"404", b"12345", b"4\r\n"]) | st.none()


def _answer(head: list, length: bytes | None) -> list:
    return head + ([] if length is None else [(b"content-length", length)])


def _outcome(scan, headers):
    try:
        return scan(headers)
    except Exception as error:
        return type(error), str(error)


@pytest.fixture
def fresh_answers(monkeypatch):
    """Empty tables, and one Date line for this test (gunicorn's changes each second)."""
    monkeypatch.setattr(asgi_worker, "_checked", {})
    monkeypatch.setattr(asgi_worker, "_written", {})
    monkeypatch.setattr(gprotocol, "_get_cached_date_header", lambda: b"Date: then\r\n")


@given(st.lists(st.tuples(ANSWER_HEADERS, LENGTHS), max_size=4))
def test_answers_headers_are_checked_as_gunicorn_checks_them_first_time_or_again(answers):
    asgi_worker._checked.clear()
    for head, length in answers * 2:  # each one new, then remembered
        headers = _answer(head, length)
        assert _outcome(asgi_worker._scan_response_headers, headers) == _outcome(
            asgi_worker._gunicorns_scan, headers
        )


def _head(send, status, headers, close, version=(1, 1)) -> bytes:
    connection = PlumbProtocol.__new__(PlumbProtocol)
    send(connection, status, headers, SimpleNamespace(version=version), close)
    return connection._response_buffer


@given(
    st.lists(st.tuples(ANSWER_HEADERS, LENGTHS), max_size=4),
    st.sampled_from([200, 201, 404, 599]),
    st.booleans(),
    st.sampled_from([(1, 1), (1, 0)]),
)
def test_an_answers_head_is_written_as_gunicorn_writes_it_first_time_or_again(
    answers, status, close, version
):
    asgi_worker._written.clear()
    for head, length in answers * 2:
        headers = _answer(head, length)
        if _outcome(asgi_worker._gunicorns_scan, headers)[0] in (
            gprotocol.InvalidResponseHeaderName,
            gprotocol.InvalidResponseHeader,
        ):
            continue  # refused before a head is written
        ours = _head(PlumbProtocol._send_response_start, status, headers, close, version)
        assert ours == _head(ASGIProtocol._send_response_start, status, headers, close, version)


@pytest.mark.parametrize("close", [False, True])
@pytest.mark.parametrize(
    "head",
    [
        [(b"Server", b"plumb"), (b"content-type", b"a")],
        [(b"content-type", b"a"), (b"date", b"Thu, 01 Jan 1970 00:00:00 GMT")],
        [(b"Connection", b"close"), (b"allow", b"GET")],
        [(b"connection", b"keep-alive"), (b"server", b"x"), (b"Date", b"d"), (b"x-n", b"1")],
        [("Server", "text"), (b"x-n", b"1")],
    ],
)
def test_an_answers_own_date_server_and_connection_are_kept_as_gunicorn_keeps_them(
    fresh_answers, head, close
):
    headers = [*head, (b"content-length", b"2")]
    for _ in range(2):  # written, then remembered
        ours = _head(PlumbProtocol._send_response_start, 200, headers, close)
        assert ours == _head(ASGIProtocol._send_response_start, 200, headers, close)


def test_a_kind_of_answer_is_checked_and_written_once(fresh_answers):
    head = [(b"content-type", b"application/json"), (b"allow", b"GET, POST")]
    for length in (b"10", b"404", b"7"):
        headers = [*head, (b"content-length", length)]
        assert asgi_worker._scan_response_headers(headers) == (True, length, False)
        written = _head(PlumbProtocol._send_response_start, 201, headers, False)
        assert b"\r\ncontent-length: " + length + b"\r\nServer: " in written

    assert list(asgi_worker._checked) == [tuple(head)]
    assert [key[2] for key in asgi_worker._written] == [tuple(head)]


def test_a_cookie_is_never_remembered_and_the_tables_are_bounded(fresh_answers):
    cookie = [(b"set-cookie", b"sessionid=secret"), (b"content-length", b"2")]
    asgi_worker._scan_response_headers(cookie)
    _head(PlumbProtocol._send_response_start, 200, cookie, False)
    assert asgi_worker._checked == {}
    assert asgi_worker._written == {}

    for n in range(asgi_worker.KEPT_HEADS + 5):
        asgi_worker._scan_response_headers([(b"x-n", b"%d" % n), (b"content-length", b"0")])
    assert 0 < len(asgi_worker._checked) <= asgi_worker.KEPT_HEADS


def test_a_bad_length_after_a_kind_of_answer_is_known_is_refused_as_gunicorn_refuses_it(
    fresh_answers,
):
    head = [(b"content-type", b"application/json")]
    asgi_worker._scan_response_headers([*head, (b"content-length", b"2")])
    bad = [*head, (b"content-length", b"2\r\nx: y")]

    with pytest.raises(gprotocol.InvalidResponseHeader):
        asgi_worker._scan_response_headers(bad)


@given(ANSWER_HEADERS, st.integers(min_value=0, max_value=99))
def test_an_answers_account_gives_gunicorns_headers_when_read(headers, sent):
    ours = asgi_worker._ResponseInfo(200, headers, sent)
    gunicorns = gprotocol.ASGIResponseInfo(200, headers, sent)
    assert (ours.status, ours.sent, ours.headers) == (
        gunicorns.status,
        gunicorns.sent,
        gunicorns.headers,
    )


def test_the_worker_swaps_the_names_gunicorns_protocol_answers_with(monkeypatch):
    for name in ("_scan_response_headers", "ASGIResponseInfo"):
        monkeypatch.setattr(gprotocol, name, getattr(gprotocol, name))
    monkeypatch.setattr(gasgi, "ASGIProtocol", gasgi.ASGIProtocol)
    monkeypatch.setattr(gasgi.ASGIWorker, "init_process", lambda self: None)

    asgi_worker.Worker.init_process(asgi_worker.Worker.__new__(asgi_worker.Worker))

    assert gprotocol._scan_response_headers is asgi_worker._scan_response_headers
    assert gprotocol.ASGIResponseInfo is asgi_worker._ResponseInfo
    source = inspect.getsource(gprotocol)
    assert "_scan_response_headers(response_headers)" in source
    assert "ASGIResponseInfo(response_status, response_headers, response_sent)" in source
    for name in ("_get_cached_status_line", "_get_cached_date_header", "_CACHED_SERVER_HEADER"):
        assert hasattr(gprotocol, name), name


# --- the gunicorn names this builds on ---------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "_send_error_response",
        "_setup_callback_parser",
        "_on_headers_complete",
        "_arm_keepalive_timer",
        "_close_transport",
        "_safe_write",
        "connection_made",
        "connection_lost",
        "data_received",
    ],
)
def test_the_protocol_methods_the_worker_overrides_are_gunicorns(name):
    assert callable(getattr(ASGIProtocol, name, None)), f"gunicorn's ASGIProtocol.{name} is gone"


def test_the_names_the_worker_swaps_and_wraps_are_gunicorns():
    # _serve builds each connection's protocol from the module's name for it.
    assert "ASGIProtocol(self)" in inspect.getsource(gasgi.ASGIWorker._serve)
    assert "self.loop.create_server(" in inspect.getsource(gasgi.ASGIWorker._serve)
    assert callable(getattr(gasgi.ASGIWorker, "_setup_event_loop", None))
    source = ASGIProtocol.__init__.__code__.co_names
    for attribute in ("_request_ready", "_closed", "log", "worker"):
        assert attribute in source, attribute


def test_the_worker_runs_on_uvloop_and_keeps_its_backlog_wrapper(monkeypatch, tmp_path):
    import uvloop

    # The config sets PROMETHEUS_MULTIPROC_DIR for gunicorn's processes when imported: set
    # here (and taken back after), so that later tests' subprocesses do not inherit it.
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    from plumb_site import gunicorn_config

    assert gunicorn_config.asgi_loop == "uvloop"
    assert gunicorn_config.http_parser == "python"
    worker = asgi_worker.Worker.__new__(asgi_worker.Worker)
    worker.cfg = SimpleNamespace(asgi_loop=gunicorn_config.asgi_loop, backlog=2048)
    worker.log = SimpleNamespace(debug=lambda *a: None, warning=lambda *a: None)
    worker._setup_event_loop()
    try:
        assert isinstance(worker.loop, uvloop.Loop)
        # The worker's own create_server, which listens again with gunicorn's backlog.
        assert worker.loop.create_server.__name__ == "create_server_keeping_the_backlog"
    finally:
        worker.loop.close()
        asyncio.set_event_loop(None)
