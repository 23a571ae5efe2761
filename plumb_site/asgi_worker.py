"""gunicorn's ``asgi`` worker, with its own error answers in plumb's JSON shape.

A request gunicorn cannot parse never reaches plumb: a request line past
``limit_request_line`` (``414``), a header past ``limit_request_field_size``
or too many of them (``431``), a malformed request (``400``), a transfer
coding it does not know (``501``). gunicorn writes those answers itself, in
plain text; SPEC §2 wants every error in one JSON shape, so this worker
writes them as ``{"error": {"code", "message", "details"}}``.

gunicorn offers no setting for this. The worker swaps in a protocol class
whose ``_send_error_response`` (a private method) writes JSON, and the
``gasgi`` module's name for the protocol is where ``_serve`` finds it.
``tests/plumb_site/test_asgi_worker.py`` pins both, and a real server's
``414``/``431`` answers, so a gunicorn upgrade that moves them fails loudly.

**A client that leaves before its answer** is logged ``499``: gunicorn drops
whatever the application sends once the connection is gone, and logs the
request as its own ``500``.
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

from gunicorn.asgi.protocol import ASGIProtocol
from gunicorn.workers import gasgi

from common.errors import error_body

CODES = {
    400: "bad_request",
    414: "uri_too_long",
    426: "upgrade_required",
    431: "headers_too_large",
    500: "internal_error",
    501: "not_implemented",
}
MESSAGES = {
    400: "The request was malformed.",
    414: "The request's URL is longer than the server accepts.",
    426: "This address needs a protocol upgrade.",
    431: "The request's headers are larger than the server accepts.",
    500: "The server failed to handle this request.",
    501: "The request uses a transfer coding the server does not implement.",
}


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


class _ConnectionLog:
    """gunicorn's logger as one connection uses it: a client gone unanswered is a 499."""

    def __init__(self, log: Any, connection: JsonErrorsProtocol) -> None:
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


class JsonErrorsProtocol(ASGIProtocol):
    def __init__(self, worker: Any) -> None:
        super().__init__(worker)
        self.log = _ConnectionLog(worker.log, self)

    def _send_error_response(self, status, message, extra_headers=()):
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
        gasgi.ASGIProtocol = JsonErrorsProtocol
        super().init_process()
