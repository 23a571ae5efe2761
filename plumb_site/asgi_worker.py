"""gunicorn's ``asgi`` worker, with plumb's bounds on connections and its JSON error answers.

**Connections** (SPEC §2). Left alone, gunicorn's worker arms no timer before
a connection's first request and holds every connection that arrives (it
does not enforce ``worker_connections``): silent sockets pile up to the
process's file limit, where ``accept()`` fails, asyncio pauses accepting a
second at a time and logs every failure with its traceback, and ``/healthz``
goes unanswered. This worker bounds both, on HTTP/1.1 (the only protocol
plumb's gunicorn speaks):

* **Header timeout.** A connection must send a complete request head within
  ``PLUMB_HEADER_TIMEOUT`` seconds of opening; once kept alive, within as
  many seconds of the first byte of its next head (silence between requests
  is gunicorn's ``keepalive``). Past it the connection is closed, with a
  ``408 request_timeout`` if part of a head had come. A head pipelined behind
  a request is bounded by ``keepalive`` alone.
* **A cap per process**, ``PLUMB_MAX_CONNECTIONS``. A connection that arrives
  past it takes the place of the oldest connection that is waiting for a
  request head: that one holds no request, no thread and no waiting call,
  so a flood of silent connections sheds its own oldest, and ``/healthz``
  still gets in at once instead of waiting out a header timeout
  (``tests/scale/test_connections.py``: 20,000 of them on one process).
  Connections reading a body, running in Django or waiting in a long-poll
  are never cut, nor one whose head is in its socket unread (the event loop
  accepts a burst of connections before it reads their requests). Only when
  no connection held may go is the newcomer refused at once: ``503
  too_many_connections`` with ``Retry-After: 1``, then closed. A kept-alive
  connection is shed between requests like any other idle one; a client
  that sends its next request at that moment sees the connection close, as
  at the end of ``keepalive``.
* **Files.** The process raises its open-file limit (the soft one, up to the
  hard one) to hold its connections and ``FILE_RESERVE`` more; where the
  hard limit is too low, the cap is lowered to fit, with a warning at start,
  so ``accept()`` never runs out of files. The listening socket keeps
  gunicorn's ``backlog`` (asyncio would set 100).
* **Bounded logs.** Shed and refused connections and failed ``accept()``
  calls are logged at most once per 10 s each (``common.logs.BoundedLog``)
  and counted in ``plumb_connections_closed_total{reason}``. (On uvloop,
  the loop ``gunicorn_config`` names, libuv meets a failed ``accept()`` for
  want of files by accepting and closing that connection with a descriptor
  it keeps in reserve, and reports nothing; the files the cap leaves spare
  keep it from happening in the first place.)

**Even shares.** Given a slot of the master's board (``gunicorn_config.pre_fork``),
the worker accepts its connections itself, leaving each new one to a worker
that holds fewer (``plumb_site/accept.py``), instead of through
``create_server``; its ``Connections`` tell the board when one goes.

**A client that leaves before its answer** is logged ``499``: gunicorn drops
whatever the application sends once the connection is gone, and logs the
request as its own ``500``.

**Error answers.** A request gunicorn cannot parse never reaches plumb: a
request line past ``limit_request_line`` (``414``), a header past
``limit_request_field_size`` or too many of them (``431``), a malformed
request (``400``), a transfer coding it does not know (``501``). gunicorn
writes those answers itself, in plain text; SPEC §2 wants every error in one
JSON shape, so this worker writes them as ``{"error": {"code", "message",
"details"}}``.

**Header checks in C.** gunicorn's Python parser (the one plumb's gunicorn
configuration names) checks every byte of every header name and value in a
Python loop: on a small request, an eighth of the bytecodes the worker runs
and 2 % of its instructions (docs/internals.md). ``_Parser`` makes the same
checks with ``bytes.translate`` over tables built, byte by byte, from
gunicorn's own two checks (``tests/plumb_site/test_asgi_worker.py`` holds the
two to the same answers on any bytes).

**Heads read and written in one pass.** A request head that has arrived
whole is split at once rather than line by line (``_Parser._parse_headers``),
and an answer's status line and headers, the same from one answer of a kind
to the next but for its length, are checked and written once per kind
(``_scan_response_headers``, ``PlumbProtocol._send_response_start``); the
access line's account of an answer turns its headers into text only if the
line reads them (``_ResponseInfo``). Together about 1,200 of the 27,400
bytecodes of a served send (docs/internals.md).

gunicorn offers no setting for any of this. The worker swaps in a protocol
class that overrides some of ``ASGIProtocol``'s private methods, and the
``gasgi`` module's name for the protocol is where ``_serve`` finds it; it
swaps the ``protocol`` module's names for the header check and the account
of an answer, which gunicorn's protocol looks up as it answers.
``tests/plumb_site/test_asgi_worker.py`` pins the names, and
``tests/scale/`` a real server's answers, so a gunicorn upgrade that moves
them fails loudly.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import resource
import struct
import termios
from collections.abc import Iterable
from http import HTTPStatus
from typing import Any, Protocol

from gunicorn.asgi import protocol as gprotocol
from gunicorn.asgi.parser import (
    InvalidHeader,
    InvalidHeaderName,
    LimitRequestHeaders,
    ParseError,
    PythonProtocol,
)
from gunicorn.asgi.protocol import ASGIProtocol, ASGIResponseInfo
from gunicorn.workers import gasgi

from common.errors import error_body
from common.logs import BoundedLog
from plumb_site import accept
from plumb_site.accept import Seat

CODES = {
    400: "bad_request",
    408: "request_timeout",
    414: "uri_too_long",
    426: "upgrade_required",
    431: "headers_too_large",
    500: "internal_error",
    501: "not_implemented",
    503: "too_many_connections",
}
MESSAGES = {
    400: "The request was malformed.",
    408: "The request's head did not arrive in time.",
    414: "The request's URL is longer than the server accepts.",
    426: "This address needs a protocol upgrade.",
    431: "The request's headers are larger than the server accepts.",
    500: "The server failed to handle this request.",
    501: "The request uses a transfer coding the server does not implement.",
    503: "The server holds as many connections as it may, each of them busy; try again shortly.",
}
# Files a process needs besides the connections it holds: the listening
# socket, logs, metrics files, database and wake-up connections (some 50),
# and under a flood the connections accepted but not yet admitted or shed
# ones not yet closed: asyncio accepts up to 100 a turn of the event loop,
# and a connection is admitted two turns later and closed one after that.
FILE_RESERVE = 512
ACCEPT_FAILED = "socket.accept() out of system resource"  # asyncio's message
CLOSE_REASONS = ("header_timeout", "shed", "refused")
SHED_SCAN = 64  # waiting connections looked at for one to shed, oldest first


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


class Held(Protocol):
    def has_unread(self) -> bool: ...

    def shed(self) -> None: ...


class Connections:
    """The connections one process holds, and which of them wait for a request head.

    Runs on the event loop only: no lock. A connection waits for a head from
    the moment it opens, and again once its answer is out; the first that
    started waiting is the first to go when room is needed. ``open_gauge``
    and ``closed_counter`` are ``metrics.CONNECTIONS_OPEN`` and
    ``metrics.CONNECTIONS_CLOSED``, which only a worker may import: the
    metrics folder does not exist yet when gunicorn's master imports this.
    """

    def __init__(
        self, limit: int, *, open_gauge: Any, closed_counter: Any, seat: Seat | None = None
    ) -> None:
        self.limit = limit
        self._held: set[Held] = set()
        self._waiting: dict[Held, None] = {}  # in the order they started waiting
        self._open = open_gauge
        self._closed = {reason: closed_counter.labels(reason) for reason in CLOSE_REASONS}
        # Where the other workers read how many this one holds: a connection
        # counts there from its accept (plumb_site/accept.py) until released here.
        self._seat = seat

    def __len__(self) -> int:
        return len(self._held)

    def admit(self, connection: Held) -> bool:
        """Hold ``connection``, shedding an idle one if at the cap; False: refuse it."""
        if len(self._held) >= self.limit:
            idle = self._oldest_idle()
            if idle is None:
                if self._seat is not None:
                    self._seat.closed()  # refused: the worker holds it no more
                return False
            self.release(idle)
            idle.shed()
        self._held.add(connection)
        self._waiting[connection] = None
        self._open.inc()
        return True

    def _oldest_idle(self) -> Held | None:
        """The connection that has waited longest for a head and has none unread.

        Bytes still unread are a head the event loop has not got to yet (it
        accepts a burst of connections before it reads their requests): that
        connection is about to be busy. Past ``SHED_SCAN`` such ones the loop
        is far behind on reading, and the newcomer is refused instead.
        """
        for connection in itertools.islice(self._waiting, SHED_SCAN):
            if not connection.has_unread():
                return connection
        return None

    def waiting(self, connection: Held) -> None:
        if connection in self._held:
            self._waiting.pop(connection, None)
            self._waiting[connection] = None

    def busy(self, connection: Held) -> None:
        self._waiting.pop(connection, None)

    def release(self, connection: Held) -> None:
        if connection in self._held:
            self._held.remove(connection)
            self._waiting.pop(connection, None)
            self._open.dec()
            if self._seat is not None:
                self._seat.closed()

    def count_closed(self, reason: str) -> None:
        """Count a connection the server closed before its request (``CLOSE_REASONS``)."""
        self._closed[reason].inc()


def fit_file_limit(connections: int) -> int:
    """Raise this process's open-file limit for ``connections``; how many fit under it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = connections + FILE_RESERVE
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return connections
    soft = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return max(1, min(connections, soft - FILE_RESERVE))


class _ConnectionLog:
    """gunicorn's logger as one connection uses it: a client gone unanswered is a 499."""

    def __init__(self, log: Any, connection: PlumbProtocol) -> None:
        self._log = log
        self._connection = connection

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)

    def access(self, resp: Any, req: Any, environ: Any, request_time: Any) -> None:
        # Nothing was sent (no headers) and the connection is gone: gunicorn
        # dropped the application's answer and wrote down its own 500.
        if resp.status == 500 and not resp.headers and self._connection._closed:
            resp.status = 499
        self._log.access(resp, req, environ, request_time)


def _bytes_where(check: Any) -> bytes:
    """The bytes for which gunicorn's check of a one-byte string answers true."""
    return bytes(c for c in range(256) if check(None, bytes([c])))


# Each check is a test of every byte on its own (and a token is not empty).
_TOKEN = _bytes_where(PythonProtocol._is_valid_token)
_FIELD_VALUE = _bytes_where(lambda self, b: not PythonProtocol._has_invalid_header_chars(self, b))


class _Parser(PythonProtocol):
    """gunicorn's parser, checking header names and values in C rather than byte by byte,
    and reading a head that has arrived whole in one pass.

    gunicorn's ``_parse_headers`` takes a head line by line: it looks for the
    line's end twice, copies the line out, deletes it from the front of the
    buffer (moving what follows) and makes the exception it would raise for
    an overlong line, for every line: a send's head of seven headers, about
    930 bytecodes (480 here). When the head's blank line is in the buffer
    already (a client's request arrives in one read), ``_parse_headers`` here
    splits it at once and runs gunicorn's checks on each line in gunicorn's
    order, with gunicorn's exceptions, callbacks and state after it; a head
    still arriving is gunicorn's to read. ``tests/plumb_site/test_asgi_worker.py`` holds the
    two to the same outcome on any head.
    """

    __slots__ = ()

    def _parse_headers(self) -> bool:
        buffer = self._buffer
        if self._scan_from or buffer.startswith(b"\r\n"):  # arriving still, or no header
            return super()._parse_headers()
        end = buffer.find(b"\r\n\r\n")
        if end == -1:
            return super()._parse_headers()
        field_size = self._limit_request_field_size
        fields = self._limit_request_fields
        on_header = self._on_header
        headers = self._headers_list
        for line in bytes(buffer[:end]).split(b"\r\n"):
            if b"\n" in line:
                raise ParseError("Bare LF as line terminator, CRLF required (RFC 9112 section 2.2)")
            if field_size > 0 and len(line) + 2 > field_size:
                raise LimitRequestHeaders("Request header field is too large")
            self._header_count += 1
            if fields > 0 and self._header_count > fields:
                raise LimitRequestHeaders("Too many headers")
            name, colon, value = line.partition(b":")
            if not colon:
                raise InvalidHeader("Missing colon in header")
            if not name or name.translate(None, _TOKEN):  # _is_valid_token, inline
                raise InvalidHeaderName(name.decode("latin-1"))
            value = value.strip(b" \t")
            if value.translate(None, _FIELD_VALUE):  # _has_invalid_header_chars
                raise InvalidHeader("Invalid characters in header value")
            name = name.lower()
            headers.append((name, value))
            if on_header:
                on_header(name, value)
        del buffer[: end + 4]
        self._finalize_headers()
        return True

    @staticmethod
    def _is_valid_token(data: bytes) -> bool:
        return bool(data) and not data.translate(None, _TOKEN)

    @staticmethod
    def _has_invalid_header_chars(value: bytes) -> bool:
        return bool(value.translate(None, _FIELD_VALUE))


# --- answers: what repeats from one to the next, checked and written once ------------------------

KEPT_HEADS = 256  # kinds of answer remembered (each table empties when full, and fills again)
_checked: dict[tuple, bool] = {}  # an answer's headers but its length -> whether it is chunked
_written: dict[tuple, tuple[bytes, bool, bool, bool]] = {}  # (version, status, headers) -> head
_gunicorns_scan = gprotocol._scan_response_headers


def _head_and_length(headers: Any) -> tuple[tuple, bytes] | None:
    """An answer's headers but its last, and the last's value, when the last is its length.

    So the front gives every answer (``plumb_site/asgi.py``): its headers, the
    same from one answer to the next of a kind, then the length of its body.
    """
    if type(headers) is list and headers:
        last = headers[-1]
        if (
            type(last) is tuple
            and len(last) == 2
            and last[0] == b"content-length"
            and type(last[1]) is bytes
        ):
            return tuple(headers[:-1]), last[1]
    return None


def _keepable(head: tuple) -> bool:
    """Whether an answer's headers may be remembered: never a cookie, nor a second length."""
    try:
        hash(head)
    except TypeError:
        return False
    names = {(n if isinstance(n, bytes) else str(n).encode("latin-1")).lower() for n, _ in head}
    return b"set-cookie" not in names and b"content-length" not in names


def _keep(table: dict, key: tuple, value: Any) -> None:
    if len(table) >= KEPT_HEADS:
        table.clear()
    table[key] = value


def _scan_response_headers(headers: Any) -> tuple[bool, Any, bool]:
    """gunicorn's check of an answer's headers, each kind of answer's checked once.

    gunicorn matches every name and value against its patterns for every
    answer, about 340 bytecodes of a send's (90 here, the split included); the
    headers of an answer the front made differ from the last of its kind only
    in its length, whose value is checked each time.
    """
    split = _head_and_length(headers)
    if split is not None:
        head, length = split
        try:
            chunked = _checked.get(head)
        except TypeError:  # a header given as a list
            chunked = None
        if chunked is not None and gprotocol._HEADER_VALUE_RE.fullmatch(length):
            return True, length, chunked
    found = _gunicorns_scan(headers)  # refuses a bad header as gunicorn does
    if split is not None and _keepable(split[0]):
        _keep(_checked, split[0], found[2])
    return found


def _head_lines(status_line: bytes, head: tuple) -> tuple[bytes, bool, bool, bool]:
    """The status line and header lines of ``head``, and whether it holds a Date, a Server
    and a Connection header: what gunicorn's ``_send_response_start`` writes of them."""
    parts = [status_line]
    has_date = has_server = has_connection = False
    for name, value in head:
        if not isinstance(name, bytes):
            name = name.encode("latin-1")
        if not isinstance(value, bytes):
            value = value.encode("latin-1")
        parts += (name, b": ", value, b"\r\n")
        lowered = name.lower()
        has_date = has_date or lowered == b"date"
        has_server = has_server or lowered == b"server"
        has_connection = has_connection or lowered == b"connection"
    return b"".join(parts), has_date, has_server, has_connection


class _ResponseInfo(ASGIResponseInfo):
    """gunicorn's account of an answer for its access line, its headers turned into text
    only if the line reads them (plumb's format does not): 280 bytecodes of a send."""

    def __init__(self, status: int, headers: Any, sent: int) -> None:
        self.status = status
        self.sent = sent
        self._given = headers

    @property
    def headers(self) -> list[tuple[str, str]]:  # type: ignore[override]
        return ASGIResponseInfo(self.status, self._given, self.sent).headers


class PlumbProtocol(ASGIProtocol):
    """One connection: JSON error answers, a header timeout and its place under the cap."""

    def __init__(self, worker: Worker) -> None:
        super().__init__(worker)
        self.log = _ConnectionLog(worker.log, self)
        self._awaiting_head = False
        self._head_begun = False  # part of the awaited head has arrived
        self._head_timer = None

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        if not self.worker.connections.admit(self):
            self.worker.refused_log(
                "Refused a connection: %d held (PLUMB_MAX_CONNECTIONS), each one busy",
                len(self.worker.connections),
            )
            self.worker.connections.count_closed("refused")
            self._send_error_response(503, "Every connection held is busy.", [("Retry-After", "1")])
            self._drop()
            return
        self._awaiting_head = True
        self._arm_head_timer()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._awaiting_head and not self._closed:
            self._head_begun = True
            if self._head_timer is None:
                self._arm_head_timer()  # the first byte of a kept-alive connection's next head

    def _setup_callback_parser(self) -> None:
        super()._setup_callback_parser()
        if type(self._callback_parser) is PythonProtocol:
            self._callback_parser.__class__ = _Parser  # the same slots: only the checks change

    def _on_headers_complete(self) -> Any:
        self._awaiting_head = self._head_begun = False
        self._cancel_head_timer()
        self.worker.connections.busy(self)
        return super()._on_headers_complete()

    def _arm_keepalive_timer(self) -> None:
        # Called once an answer is out and nothing runs for the connection:
        # it waits for its next head, holding nothing.
        super()._arm_keepalive_timer()
        self._awaiting_head = True
        self.worker.connections.waiting(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._release()
        super().connection_lost(exc)

    def _send_response_start(
        self, status: int, headers: Any, request: Any, close: bool = False
    ) -> None:
        """gunicorn's, with the head of each kind of answer written once.

        The status line and every header but the length are the same from one
        answer of a kind to the next: kept, they are one look-up, and only the
        length, gunicorn's Server and Date lines and its ``Connection: close``
        are added, as gunicorn adds them (355 bytecodes of a send, 130 here
        with the split).
        """
        split = _head_and_length(headers)
        if split is None:
            super()._send_response_start(status, headers, request, close)
            return
        head, length = split
        key = (request.version, status, head)
        try:
            written = _written.get(key)
        except TypeError:  # a header given as a list
            super()._send_response_start(status, headers, request, close)
            return
        if written is None:
            status_line = gprotocol._get_cached_status_line(request.version, status)
            written = _head_lines(status_line, head)
            if _keepable(head):
                _keep(_written, key, written)
        lines, has_date, has_server, has_connection = written
        parts = [lines, b"content-length: ", length, b"\r\n"]
        if not has_server:
            parts.append(gprotocol._CACHED_SERVER_HEADER)
        if not has_date:
            parts.append(gprotocol._get_cached_date_header())
        if close and not has_connection:
            parts.append(b"Connection: close\r\n")
        parts.append(b"\r\n")
        self._response_buffer = b"".join(parts)

    def has_unread(self) -> bool:
        """Whether bytes wait in this connection's socket that the event loop has not read."""
        try:
            fd = self.transport.get_extra_info("socket").fileno()
            unread = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
        except (AttributeError, OSError):
            return False  # closed meanwhile: nothing to wait for
        return struct.unpack("i", unread)[0] > 0

    def shed(self) -> None:
        """Close this idle connection to make room for a new one (``Connections.admit``)."""
        self.worker.shed_log(
            "Closed the oldest idle connection to make room: %d held (PLUMB_MAX_CONNECTIONS)",
            self.worker.connections.limit,
        )
        self.worker.connections.count_closed("shed")
        self._drop()

    def _arm_head_timer(self) -> None:
        self._head_timer = self.worker.loop.call_later(
            self.worker.header_timeout, self._head_timed_out
        )

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        self.worker.connections.count_closed("header_timeout")
        if self._head_begun:
            self._send_error_response(
                408, f"No complete request head within {self.worker.header_timeout:g} seconds."
            )
        self._drop()

    def _drop(self) -> None:
        """Close a connection that has no request under way."""
        self._release()
        # Wake the connection's task before the transport reports the loss:
        # it then ends at once, where gunicorn would otherwise keep it (and
        # this object) for asgi_disconnect_grace_period.
        if self._request_ready is not None:
            self._request_ready.set()
        self._close_transport()

    def _release(self) -> None:
        self._cancel_head_timer()
        self._awaiting_head = False
        self.worker.connections.release(self)

    def _send_error_response(
        self, status: int, message: str, extra_headers: Iterable[tuple[str, str]] = ()
    ) -> None:
        """gunicorn's answer to a request it refused, as plumb's JSON error.

        gunicorn's own text (which may quote the request) goes in
        ``details.reason``; the message is plumb's fixed sentence.
        """
        body = json.dumps(
            error_body(
                CODES.get(status, f"http_{status}"),
                MESSAGES.get(status, "The request failed."),
                {"reason": message},
            )
        ).encode()
        head = "".join(
            [
                f"HTTP/1.1 {status} {_phrase(status)}\r\n",
                "Content-Type: application/json\r\n",
                f"Content-Length: {len(body)}\r\n",
                *(f"{name}: {value}\r\n" for name, value in extra_headers),
                "Connection: close\r\n\r\n",
            ]
        )
        self._safe_write(head.encode("latin-1") + body)


class Worker(gasgi.ASGIWorker):
    def init_process(self) -> None:
        gasgi.ASGIProtocol = PlumbProtocol
        # Names gunicorn's protocol looks up in its module as it answers.
        gprotocol._scan_response_headers = _scan_response_headers
        gprotocol.ASGIResponseInfo = _ResponseInfo
        super().init_process()

    def _setup_event_loop(self) -> None:
        super()._setup_event_loop()
        create_server = self.loop.create_server

        async def create_server_keeping_the_backlog(*args: Any, sock: Any, **kwargs: Any) -> Any:
            if self.seat is not None:
                # Each connection to the worker that holds fewest (plumb_site/accept.py).
                factory, ssl = args[0], kwargs.get("ssl")
                failed = self._accept_failed
                return accept.Acceptor(self.loop, sock, factory, self.seat, ssl=ssl, failed=failed)
            server = await create_server(*args, sock=sock, **kwargs)
            # asyncio listens again on gunicorn's socket, with a backlog of
            # 100: past 100 connections not yet accepted the kernel drops new
            # ones, and their clients retry a second later. Listening once
            # more gives the kernel gunicorn's ``backlog``; asyncio goes on
            # accepting at most 100 a turn, which FILE_RESERVE allows for.
            sock.listen(self.cfg.backlog)
            return server

        self.loop.create_server = create_server_keeping_the_backlog

    def run(self) -> None:
        """Serve, once the application (and so Django's settings) is loaded."""
        from django.conf import settings

        from common import metrics

        # The slot gunicorn's master gave this worker (gunicorn_config.pre_fork),
        # taken now that the application is loaded and the worker about to accept.
        self.seat = accept.seat(
            getattr(self, "plumb_slot", None), own_socket=bool(self.cfg.reuse_port)
        )
        wanted = settings.PLUMB_MAX_CONNECTIONS
        limit = fit_file_limit(wanted)
        if limit < wanted:
            self.log.warning(
                "PLUMB_MAX_CONNECTIONS is %d, but this process may open only %d files: "
                "it holds at most %d connections",
                wanted,
                resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                limit,
            )
        self.connections = Connections(
            limit,
            open_gauge=metrics.CONNECTIONS_OPEN,
            closed_counter=metrics.CONNECTIONS_CLOSED,
            seat=self.seat,
        )
        self.header_timeout = settings.PLUMB_HEADER_TIMEOUT
        self.shed_log = BoundedLog(self.log.warning)
        self.refused_log = BoundedLog(self.log.warning)
        self.accept_log = BoundedLog(self.log.error)
        self.loop.set_exception_handler(self._loop_error)
        super().run()

    def _loop_error(self, loop: Any, context: dict[str, Any]) -> None:
        # asyncio reports each failed accept() with a traceback, up to 100
        # times a turn; one line now and then says as much.
        if context.get("message") == ACCEPT_FAILED:
            self._accept_failed(context.get("exception"))
            return
        loop.default_exception_handler(context)

    def _accept_failed(self, exc: BaseException | None) -> None:
        self.accept_log("accept() failed: %s", exc)
