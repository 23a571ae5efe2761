"""Queries per operation and their plans, through Django's test client (``seed.py queries``).

Imported by ``bench/seed.py`` once Django is set up, in the same subprocess.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from django.db import connection

from rooms.models import Room

IS_POSTGRES = connection.vendor == "postgresql"
QUERY_BODY = "The body of a note or message whose queries are counted; any body would do."


def out(payload: dict[str, Any]) -> None:
    json.dump(payload, sys.stdout)
    sys.stdout.write("\n")


class Recorder:
    """``connection.execute_wrapper`` hook: every statement with its parameters."""

    def __init__(self) -> None:
        self.statements: list[tuple[str, Any]] = []

    def __call__(self, execute, sql, params, many, context):
        self.statements.append((sql, params))
        return execute(sql, params, many, context)


def _counted(client, method: str, path: str, token: str, body: dict | None = None):
    recorder = Recorder()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    with connection.execute_wrapper(recorder):
        if method == "GET":
            response = client.get(path, **headers)
        else:
            response = client.post(
                path, data=json.dumps(body), content_type="application/json", **headers
            )
    return response, recorder.statements


def _plan(sql: str, params) -> list[str]:
    if IS_POSTGRES:
        prefix = "EXPLAIN "
    elif sql.lstrip().upper().startswith(("SELECT", "UPDATE", "INSERT", "DELETE", "WITH")):
        prefix = "EXPLAIN QUERY PLAN "
    else:
        return []
    if sql.lstrip().upper().startswith(("SAVEPOINT", "RELEASE", "BEGIN", "COMMIT", "ROLLBACK")):
        return []
    with connection.cursor() as cursor:
        cursor.execute(prefix + sql, params)
        rows = cursor.fetchall()
    if IS_POSTGRES:
        return [r[0] for r in rows]
    return [f"{'  ' * _depth(rows, r)}{r[-1]}" for r in rows]


def _depth(rows, row) -> int:
    parents = {r[0]: r[1] for r in rows}
    depth, parent = 0, row[1]
    while parent:
        depth += 1
        parent = parents.get(parent, 0)
    return depth


def _operation(client, name, method, path, token, body=None, *, explain: bool, expect: int):
    # Twice: the first call may refresh last_seen_at (once per
    # PLUMB_SEEN_WRITE_INTERVAL); the second is the steady state.
    first, _ = _counted(client, method, path, token, _fresh(body))
    response, statements = _counted(client, method, path, token, _fresh(body))
    if response.status_code != expect or first.status_code != expect:
        raise SystemExit(f"{name}: {first.status_code}/{response.status_code} {response.content!r}")
    entry = _entry(statements)
    if explain:
        entry["plans"] = _plans(statements)
    return entry


TRANSACTION_CONTROL = ("BEGIN", "SAVEPOINT", "RELEASE", "COMMIT", "ROLLBACK")


def _entry(statements) -> dict[str, Any]:
    """Queries (what reaches the tables) and statements (with transaction control)."""
    queries = [s for s, _ in statements if not s.lstrip().upper().startswith(TRANSACTION_CONTROL)]
    return {
        "queries": len(queries),
        "statements": len(statements),
        "sql": [s for s, _ in statements],
    }


def _plans(statements) -> list[dict[str, Any]]:
    plans = []
    for sql, params in statements:
        plan = _plan(sql, params)
        if plan:
            plans.append({"sql": sql, "plan": plan})
    return plans


def _fresh(body: dict | None) -> dict | None:
    if body is None or "name" not in body:
        return body
    return {**body, "name": f"q-{secrets.token_hex(4)}"}


def _has_search() -> bool:
    """Whether the checkout measured has search (bench/compare.py may measure an older one)."""
    try:
        import rooms.selectors.search  # noqa: F401
    except ImportError:
        return False
    return True


def cmd_queries(args: argparse.Namespace) -> None:
    from django.test import Client

    state = json.loads(Path(args.state).read_text())
    client = Client()
    result: dict[str, Any] = {"vendor": connection.vendor}
    body = {"body": QUERY_BODY}
    if args.growth:
        growth = state["growth"]
        history = state["history_room"]
        head = Room.objects.get(slug=history).head_seq
        result["check_messages"] = _operation(
            client, "check", "GET", "/api/v1/notes/", growth["checker"]["token"],
            explain=args.explain, expect=200,
        )  # fmt: skip
        result["read_messages"] = _operation(
            client, "read", "GET",
            f"/api/v1/rooms/{history}/messages/?after_seq={head // 2}&limit=50",
            growth["reader"]["token"], explain=args.explain, expect=200,
        )  # fmt: skip
        result["send_message"] = _operation(
            client, "send", "POST", f"/api/v1/rooms/{history}/messages/",
            growth["sender"]["token"], body, explain=args.explain, expect=201,
        )  # fmt: skip
        if _has_search():
            from corpus import TWO_WORD_QUERY

            result["search"] = _operation(
                client, "search", "GET", "/api/v1/search/?" + urlencode({"q": TWO_WORD_QUERY}),
                growth["reader"]["token"], explain=args.explain, expect=200,
            )  # fmt: skip
        out(result)
        return

    me = state["clients"][0]["token"]
    pair = state["pairs"][0]
    read_room = state["read_room"]
    ops = [
        ("floor", "GET", "/api/v1/sessions/current/", me, None, 200),
        ("check_idle", "GET", "/api/v1/notes/", me, None, 200),
        ("send_busy", "POST", "/api/v1/rooms/busy-q/messages/", me, body, 201),
        ("send_spread", "POST", "/api/v1/rooms/spread-00/messages/", me, body, 201),
        (
            "read_messages",
            "GET",
            f"/api/v1/rooms/{read_room}/messages/?after_seq=100&limit=50",
            me,
            None,
            200,
        ),
        (
            "leave_note",
            "POST",
            "/api/v1/notes/",
            pair["sender"]["token"],
            {"to": pair["recipient"]["name"], "body": QUERY_BODY},
            201,
        ),
        (
            "session_start",
            "POST",
            "/api/v1/sessions/",
            state["key"],
            {"workspace": state["workspace"], "name": "x"},
            201,
        ),
    ]
    for name, method, path, token, payload, expect in ops:
        result[name] = _operation(
            client, name, method, path, token, payload, explain=args.explain, expect=expect
        )
    # A claim with exactly one note waiting (leave_note above left two: take them first).
    _counted(client, "GET", "/api/v1/notes/", pair["recipient"]["token"])
    _counted(client, "POST", "/api/v1/notes/", pair["sender"]["token"],
             {"to": pair["recipient"]["name"], "body": QUERY_BODY})  # fmt: skip
    response, statements = _counted(client, "GET", "/api/v1/notes/", pair["recipient"]["token"])
    if response.status_code != 200 or len(response.json()["notes"]) != 1:
        raise SystemExit(f"check_pending: {response.status_code} {response.content!r}")
    entry = _entry(statements)
    if args.explain:
        entry["plans"] = _plans(statements)
    result["check_pending"] = entry
    out(result)
