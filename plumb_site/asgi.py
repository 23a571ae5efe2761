"""The application plumb's server runs: an event loop in front, Django in threads behind.

gunicorn's ``asgi`` worker (``plumb_site/gunicorn_config.py``) reads requests
on an asyncio event loop, so a client that trickles its headers, or keeps a
connection open and idle between requests, costs a coroutine and a socket,
never a thread. This front then reads the whole request body, under two rules:

* a declared ``Content-Length`` past ``PLUMB_MAX_REQUEST_BYTES`` is refused at
  once (``413 request_too_large``) without reading a byte of it, and a chunked
  body that grows past the limit is cut off the same way;
* the body must arrive within ``PLUMB_BODY_TIMEOUT`` seconds
  (``408 request_timeout``).

Only a request that has fully arrived reaches Django: the WSGI application
(``plumb_site/wsgi.py``, behind the process's request gate) runs in a pool of
``PLUMB_THREADS`` threads. No thread, and so no gate seat, ever waits on a
client's socket, in either direction: the thread hands back the whole
response (plumb's are small JSON documents) and the event loop writes it.

**Counting** (``GET /metrics``): this front counts each request once it is
answered (``request_count``), from its head to its answer, so that a
waiting call's duration holds its whole wait (Django runs it once per look,
parked here between them), and a client that left before its answer counts
as ``499``; ``RequestMetricsMiddleware`` only names the operation. Django
learns nothing of a client that leaves while it runs, so the disconnect is
watched from the moment the body has arrived.

That hand-back is the one piece written here rather than taken from a2wsgi
(which builds the WSGI environ for us): a2wsgi's bridge passes every part of
a response from the thread to the loop and waits for each, three round trips
a request, which cost sends a fifth of their throughput in ``make bench``.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "plumb_site.settings")

from a2wsgi.wsgi import build_environ
from django.conf import settings
from django.core.signals import request_finished
from django.urls import Resolver404, get_resolver

from common import groupcommit, inturn, metrics, wake
from plumb_site.mcp.jsonrpc import refused_before_reading
from plumb_site.wsgi import application as wsgi_application

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

Response = tuple[int, list[tuple[bytes, bytes]], bytes]

django_threads = ThreadPoolExecutor(settings.PLUMB_THREADS, thread_name_prefix="django")
logger = logging.getLogger(__name__)


class _Refused(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class _Gone(Exception):
    """The client went away before its answer; nobody is left to read one.

    The request is still answered, with nginx's ``499 client closed request``,
    so that the metrics and the access log say what happened (an application
    that answers nothing is logged as a ``500``; gunicorn drops the answer to
    a closed connection, and ``plumb_site/asgi_worker.py`` logs that ``499``).
    """


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the parser refuses a malformed length before we see it
    return None


async def _body(receive: Receive, limit: int, timeout: float) -> bytes:
    """The whole body, or a refusal: past ``limit`` bytes, or not all here in ``timeout``.

    The deadline is kept by waiting on each ``receive()`` with a timeout, never
    by cancelling it: on Python 3.11 a cancellation that lands as a chunk
    arrives is lost inside the server's ``receive`` (``asyncio.wait_for``), and
    a client trickling a byte a second hit that often enough to never be cut off.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    chunks: list[bytes] = []
    size = 0
    while True:
        remaining = deadline - loop.time()
        pending = asyncio.ensure_future(receive())
        arrived = await _within(loop, pending, max(remaining, 0))
        if not arrived or loop.time() > deadline:
            pending.cancel()
            raise _Refused(
                408,
                "request_timeout",
                f"The request body did not arrive within {timeout:g} seconds.",
            )
        message = pending.result()
        if message["type"] == "http.disconnect":
            raise _Gone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _within(loop: asyncio.AbstractEventLoop, future: asyncio.Future, timeout: float) -> bool:
    """Whether ``future`` is done within ``timeout`` seconds; it is never cancelled here.

    ``asyncio.wait({future}, timeout=timeout)`` for one future, which every
    request's body waits on, without its sets, checks and the callback it
    makes for each future: about 190 bytecodes a call fewer (a served GET:
    17.9k → 17.7k, 2.21 → 2.19 M instructions).
    """
    waiter = loop.create_future()

    def wake(_: object = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    timer = loop.call_later(timeout, wake)
    future.add_done_callback(wake)
    try:
        await waiter
    finally:
        timer.cancel()
        future.remove_done_callback(wake)
    return future.done()


def _too_large(limit: int) -> _Refused:
    return _Refused(
        413, "request_too_large", f"The request body is larger than the {limit} bytes accepted."
    )


async def _refuse(send: Send, refusal: _Refused, path: str) -> None:
    body = refused_before_reading(path, refusal.status, refusal.code, refusal.message)
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": refusal.status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                # The rest of the body was never read: the connection cannot be reused.
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


def _django(
    scope: Scope, body: bytes, may_park: bool, resumed: wake.Resumed | None, labels: dict
) -> tuple[Response | wake.Parked, list[groupcommit.Write]]:
    """One request through Django's WSGI application, in a thread of the pool.

    A waiting call that parks (``wake.Parked``) unwinds the request; its
    ``request_finished`` is sent here, as Django would have at its end.
    ``labels`` gets the request's metric labels (``metrics.FRONT_LABELS``).
    Also returns the writes the request deferred (``common/groupcommit.py``):
    its answer waits for their commit.
    """
    environ = build_environ(scope, io.BytesIO(body))
    # The body is all here, however it was framed: Django reads what this says.
    environ["CONTENT_LENGTH"] = str(len(body))
    environ[metrics.FRONT_LABELS] = labels
    started: list[Any] = []
    chunks: list[bytes] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info=None):
        started[:] = [status, headers]
        return chunks.append

    with groupcommit.collecting() as writes:
        try:
            with wake.parking(allowed=may_park, resumed=resumed):
                result = wsgi_application(environ, start_response)
        except wake.Parked as parked:
            request_finished.send(sender=type(parked))
            return parked, writes
        try:
            chunks.extend(result)
        finally:
            if hasattr(result, "close"):
                result.close()  # Django's request_finished: connections are tidied here
    status, headers = started
    content = b"".join(chunks)
    # The length of what is sent, stated here for every answer: the API's paths skip
    # Django's CommonMiddleware, which states it (plumb_site/middleware.py, _BrowserOnly).
    encoded = [
        (lowered.encode("latin-1"), value.encode("latin-1"))
        for name, value in headers
        if (lowered := name.lower()) != "content-length"
    ]
    encoded.append((b"content-length", b"%d" % len(content)))
    return (int(status.split(" ", 1)[0]), encoded, content), writes


# Runs take turns in as many threads as the request gate admits
# (common/inturn.py); with the gate open (PostgreSQL) each has its own.
_in_turn = (
    inturn.InTurn(lambda: django_threads, jobs=settings.PLUMB_ACTIVE_REQUESTS)
    if settings.PLUMB_ACTIVE_REQUESTS
    else None
)
_woken_running = 0  # runs of woken waiting calls under way: they may defer writes
_group_commit = groupcommit.GroupCommit(gathering=lambda: _woken_running)


def _unavailable(scope: Scope) -> Response:
    """The answer of a request whose deferred writes did not commit: never its own."""
    body = refused_before_reading(
        scope["path"], 503, "database_unavailable", "The database did not take a write; try again."
    )
    payload = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"retry-after", b"1")]
    return 503, [*headers, (b"content-length", str(len(payload)).encode())], payload


_parked = 0  # waiting calls this process holds on its event loop


def parked_calls() -> int:
    return _parked


async def _answer(scope: Scope, body: bytes, gone: asyncio.Future, labels: dict) -> Response:
    """Django's answer; a waiting call parks on the event loop between its runs.

    Each run takes a thread only while it looks (at the start, and when a
    commit it waits for wakes it). ``PLUMB_PARKED_POLLS`` bounds how many
    calls a process holds parked; past it a call waits in its thread, under
    the rules of ``mailbox/wakeups.py``. A parked call whose client leaves
    (``gone``) ends there: ``_Gone``.
    """
    global _parked, _woken_running
    loop = asyncio.get_running_loop()
    resumed = None
    while True:
        may_park = _parked < settings.PLUMB_PARKED_POLLS
        # Counted while it runs: the group commit gathers the writes of such runs.
        counted = resumed is not None and resumed.woken
        _woken_running += counted
        try:
            if _in_turn is not None:
                # Behind the gate's seats: one waiting in its thread steps aside.
                outcome, writes = await _in_turn.run(
                    _django, scope, body, may_park, resumed, labels
                )
            else:
                outcome, writes = await loop.run_in_executor(
                    django_threads, _django, scope, body, may_park, resumed, labels
                )
        finally:
            _woken_running -= counted
        if writes:
            # Committed with those of the requests beside it; answered only once durable.
            try:
                await _group_commit.commit(writes)
            except Exception:
                logger.exception("deferred writes of %s did not commit", scope["path"])
                return _unavailable(scope)
        if not isinstance(outcome, wake.Parked):
            return outcome
        _parked += 1
        metrics.POLLS_WAITING.inc()
        try:
            remaining = outcome.deadline - time.monotonic()
            woken = asyncio.ensure_future(outcome.subscription.wait_async(remaining))
            await asyncio.wait({woken, gone}, return_when=asyncio.FIRST_COMPLETED)
            if not woken.done():
                woken.cancel()
                raise _Gone
        finally:
            _parked -= 1
            metrics.POLLS_WAITING.dec()
            wake.unsubscribe(outcome.subscription)
        resumed = wake.Resumed(outcome.deadline, outcome.ticket, woken.result())


def _warm_up() -> None:
    """Import every view before the first request, not during it.

    The URLconf pulls in DRF, the API, the admin and MCP: on a busy small
    machine that took seconds, which the first client of each process waited.
    """
    get_resolver().url_patterns  # noqa: B018 (the property imports the URLconf)


async def _lifespan(receive: Receive, send: Send) -> None:
    """Start: import the views, and listen for other processes' wake-ups (common/wake/)."""
    listening = None
    try:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await asyncio.to_thread(_warm_up)
                listening = wake.listen()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    finally:
        if listening is not None:
            await listening.close()


async def application(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        await _lifespan(receive, send)
        return
    if scope["type"] != "http":
        return  # no WebSockets: the connection is closed unanswered
    started = time.perf_counter()
    labels: dict[str, tuple] = {}
    status = await _respond(scope, receive, send, labels)
    named = labels.get("labels")
    if named is None:  # refused or gone before Django saw it
        operation, method, label = _operation(scope), metrics.method_label(scope["method"]), None
    else:
        operation, method, label = named
    if status == 499 or label is None:
        label = str(status)
    metrics.request_count(operation, method, label, time.perf_counter() - started)


async def _respond(scope: Scope, receive: Receive, send: Send, labels: dict) -> int:
    """Answer one request; the status it was answered with (499: its client left first)."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    try:
        declared = _declared_length(scope)
        if declared is not None and declared > limit:
            raise _too_large(limit)
        body = await _body(receive, limit, settings.PLUMB_BODY_TIMEOUT)
    except _Refused as refusal:
        await _refuse(send, refusal, scope["path"])
        return refusal.status
    except _Gone:
        return await _answer_gone(send)
    # The body is all here: the next message from the client can only be its leaving.
    gone = asyncio.ensure_future(receive())
    try:
        status, headers, content = await _answer(scope, body, gone, labels)
        if gone.done():  # it left while Django ran: nobody reads this answer
            raise _Gone
    except _Gone:
        return await _answer_gone(send)
    finally:
        gone.cancel()
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": content})
    return status


async def _answer_gone(send: Send) -> int:
    await send({"type": "http.response.start", "status": 499, "headers": []})
    await send({"type": "http.response.body", "body": b""})
    return 499


def _operation(scope: Scope) -> str:
    """The operation of a request Django never saw, named as ``metrics.request_labels`` would."""
    try:
        return get_resolver().resolve(scope["path"]).view_name
    except Resolver404:
        return "unmatched"
