"""What plumb counts for ``GET /metrics`` (Prometheus text format).

It lives on the floor because every floor counts: the request gate
(``common``), notes (``mailbox``), room sends (``rooms``), requests,
connections and the SQLite writer queue (``plumb_site``). The roof serves the scrape
(``plumb_site.views.metrics``) and adds what is computed then (pending notes).

**Cost on the hot path.** Counting is an addition to a value in memory under
one lock: no query, no I/O, no allocation past the first use of a label set.
With several server processes (``make serve``) prometheus-client's
multiprocess mode keeps each process's values in a memory-mapped file under
``PROMETHEUS_MULTIPROC_DIR`` (``plumb_site/gunicorn_config.py`` sets it before
the workers start, so this module is imported with it set), and a scrape,
whichever process answers it, sums the files of every process. Without that
variable (tests, ``runserver``, one process) the values stay in this process.

**Labels stay bounded.** Operations are URL names and MCP tool and method
names, never paths or anything else a client chose; methods outside HTTP's
usual few count as ``other``.
"""

from __future__ import annotations

from django.http import HttpRequest
from prometheus_client import Counter, Gauge, Histogram

# Long-polls answer after up to 30 s, so requests need buckets that far.
_REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_WAIT_BUCKETS = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 30)
_LABELS = ("operation", "method", "status")
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

REQUESTS = Counter(
    "plumb_requests",
    "Requests answered, by operation (URL name, or mcp:<tool or method>), method and status.",
    _LABELS,
)
REQUEST_SECONDS = Histogram(
    "plumb_request_duration_seconds",
    "Time from the request's head to its answer, by operation, method and status: the body "
    "arriving, the turn for a thread and the request gate (plumb_gate_wait_seconds), Django, "
    "and all the time a waiting call waited (parked or in its thread). Status 499: the "
    "client left before its answer.",
    _LABELS,
    buckets=_REQUEST_BUCKETS,
)
NOTES_SENT = Counter("plumb_notes_sent", "Notes stored (idempotent replays are not counted).")
NOTES_DELIVERED = Counter("plumb_notes_delivered", "Notes delivered to a session.")
ROOM_MESSAGES_SENT = Counter(
    "plumb_room_messages_sent", "Room messages stored (idempotent replays are not counted)."
)
CAP_REFUSALS = Counter(
    "plumb_cap_refusals",
    "Calls refused by a project's policy (SPEC §8), by cap: daily_note_budget, "
    "daily_message_budget, room_flood_limit (sends refused by a paused room, and the send "
    "that paused it), max_connected_sessions.",
    ("cap",),
)
ROOM_PAUSES = Counter(
    "plumb_room_pauses", "Rooms that paused themselves past their project's room_flood_limit."
)
PURGED_ROWS = Counter(
    "plumb_purged_rows",
    "Rows the retention purge deleted, by what: events, messages, notes, conversations.",
    ("what",),
)
EXPORTS = Counter("plumb_exports", "Project exports written (plumb export, the admin action).")
POLLS_WAITING = Gauge(
    "plumb_polls_waiting",
    "Calls waiting right now (check_messages, read_messages, wait_for_activity; REST and MCP).",
    # Summed over the processes alive now: a worker that died waits for nothing.
    multiprocess_mode="livesum",
)
THROTTLED = Counter(
    "plumb_throttled", "Calls refused with 429 by a rate limit, by limit.", ("limit",)
)
CACHE_ERRORS = Counter(
    "plumb_cache_errors",
    "Calls to the shared cache (REDIS_URL) that failed or were skipped after a failure; "
    "rate limits let those requests through uncounted (common/cache.py).",
)
GATE_WAIT_SECONDS = Histogram(
    "plumb_gate_wait_seconds",
    "Time a request waited for its process's request gate (common/gate.py).",
    buckets=_WAIT_BUCKETS,
)
WAKE_HELD = Counter(
    "plumb_wake_held",
    "Wake-ups for another process of this host held back because its queue was full, each "
    "sent with the rest it is owed once it has room (common/wake/).",
)
WAKE_LISTEN_HEARD = Gauge(
    "plumb_wake_listen_heard_timestamp_seconds",
    "When the LISTEN connection last heard from PostgreSQL, a notification or the answer to "
    "its periodic check, as a Unix time (common/wake/); 0 where nothing listens (SQLite).",
    # The stalest of the processes alive now: one deaf listener is enough to miss wake-ups.
    multiprocess_mode="livemin",
)
CONNECTIONS_OPEN = Gauge(
    "plumb_connections_open",
    "Connections the server processes hold now (PLUMB_MAX_CONNECTIONS each).",
    multiprocess_mode="livesum",
)
CONNECTIONS_CLOSED = Counter(
    "plumb_connections_closed",
    "Connections the server closed before a request head arrived, by reason: header_timeout "
    "(PLUMB_HEADER_TIMEOUT), shed (the oldest idle one, to make room past "
    "PLUMB_MAX_CONNECTIONS), refused (past it, every one held busy).",
    ("reason",),
)
SQLITE_WRITER_WAIT_SECONDS = Histogram(
    "plumb_sqlite_writer_wait_seconds",
    "Time a write (a transaction, or a statement outside one) queued before asking SQLite "
    "for its lock (plumb_site/sqlite).",
    buckets=_WAIT_BUCKETS,
)

# Under the server's front (plumb_site/asgi.py) the WSGI environ holds a dict
# here: RequestMetricsMiddleware puts the request's labels in it, and the front
# counts the request once it is answered (``request_count``), so that the
# duration covers a parked call's wait and a client that left counts as 499.
FRONT_LABELS = "plumb.request_labels"

# A request's labels, as the MCP endpoint sets them (see ``label_request``).
_OPERATION_ATTRIBUTE = "plumb_metrics_operation"
_STATUS_ATTRIBUTE = "plumb_metrics_status"
# ``labels()`` checks and converts its arguments under a lock on every call,
# which cost more than the increments themselves: each label set's pair of
# values is looked up once per process and kept here (bounded, see above).
_request_children: dict[tuple[str, str, str], tuple] = {}


def label_request(
    request: HttpRequest, *, operation: str | None = None, status: int | None = None
) -> None:
    """Name what ``request`` did, where its URL does not say it.

    One URL serves every MCP tool, and a tool's domain error is a 200 HTTP
    response: the endpoint names the tool and the REST status here.
    """
    if operation is not None:
        setattr(request, _OPERATION_ATTRIBUTE, operation)
    if status is not None:
        setattr(request, _STATUS_ATTRIBUTE, status)


def request_labels(request: HttpRequest, status: int | None) -> tuple[str, str, str | None]:
    """(operation, method, status) of ``request``; status None: it has no answer yet."""
    operation = getattr(request, _OPERATION_ATTRIBUTE, None)
    if operation is None:
        match = request.resolver_match
        operation = match.view_name if match is not None else "unmatched"
    status = getattr(request, _STATUS_ATTRIBUTE, status)
    return operation, method_label(request.method), None if status is None else str(status)


def method_label(method: str | None) -> str:
    return method if method in _METHODS else "other"


def request_observe(request: HttpRequest, status: int, seconds: float) -> None:
    """Count one answered request and its duration."""
    operation, method, label = request_labels(request, status)
    request_count(operation, method, label, seconds)


def request_count(operation: str, method: str, status: str, seconds: float) -> None:
    """Count one answered request, by its labels, and its duration."""
    labels = (operation, method, status)
    children = _request_children.get(labels)
    if children is None:
        children = _request_children.setdefault(
            labels, (REQUESTS.labels(*labels), REQUEST_SECONDS.labels(*labels))
        )
    count, duration = children
    count.inc()
    duration.observe(seconds)


NOTES_BOUNCED = Counter(
    "plumb_notes_bounced",
    "Notes nobody picked up within their project's note_ttl, bounced back to their sender "
    "(mailbox/services/bounces.py).",
)
