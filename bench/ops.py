"""The operations of the main table and of the growth runs, over REST."""

from __future__ import annotations

import itertools
import json
import os
import random
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from corpus import BROAD_QUERY, TWO_WORD_QUERY
from load import Client, Op, Operation, _expect

GROWTH_CAP = 5.0  # seconds per growth phase, at most

MESSAGE_BODY = (
    "Round 3 is green on SQLite and PostgreSQL. I moved the flaky import test "
    "behind the slow marker, rebased on main and pushed `fix/import-cache`; "
    "reviewers, the interesting part is the cache key in loader.py. Next: docs."
)
NOTE_BODY = (
    "Handing over: the migration is written and tested; please run it on staging, "
    "then reply here with the row counts before and after."
)


class NotePool:
    """The recipients of the note phases, and the note each one is due.

    A check delivers every pending note of its session, so "a check that
    delivers one note" takes one recipient per check: request ``i`` of a
    leave phase leaves a note to ``agents[i]`` (nothing else pending), and
    request ``i`` of the check phase after it collects the ``i``-th of those,
    which must be exactly that note. What a phase left and no check took is
    collected after it, untimed, and checked all the same.
    """

    def __init__(self, agents: list[dict[str, Any]], port: int):
        self.agents = agents
        self.port = port
        self.left: dict[int, str] = {}  # agent index -> the tag its note ends with
        self.queue: list[tuple[int, str]] = []
        self.stamps = itertools.count()

    def recipient(self, i: int) -> tuple[str, str]:
        """The recipient of request ``i`` of a leave phase, and a tag for its note's body."""
        return self.agents[i]["name"], f"(#{next(self.stamps)})"

    def room_for_leaves(self) -> int:
        problem = self.collect()
        if problem:
            raise SystemExit(f"collecting the notes of a phase failed: {problem}")
        return len(self.agents)

    def ready_to_check(self) -> int:
        self.queue = sorted(self.left.items())
        return len(self.queue)

    def check(self, c: Client, i: int) -> str:
        index, tag = self.queue[i]
        status, data = c.request("GET", "/api/v1/notes/", self.agents[index]["token"])
        if status != 200:
            return _expect(status, data, 200)
        bodies = [note["body"] for note in json.loads(data)["notes"]]
        if len(bodies) != 1 or not bodies[0].endswith(tag):
            return f"{self.agents[index]['name']} got {len(bodies)} notes, not the one ending {tag}"
        del self.left[index]
        return ""

    def collect(self) -> str:
        """Check every recipient still due a note (8 threads, untimed); the first problem."""
        self.ready_to_check()
        if not self.queue:
            return ""
        problems: list[str] = []
        indexes = iter(range(len(self.queue)))

        def drain() -> None:
            client = Client(self.port)
            try:
                for i in indexes:
                    problem = self.check(client, i)
                    if problem:
                        problems.append(problem)
            finally:
                client.close()

        threads = [threading.Thread(target=drain) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.queue = []
        return problems[0] if problems else ""


def main_operations(
    state: dict[str, Any], rnd: Callable[[], int], pool: NotePool
) -> dict[str, Operation]:
    """The operations of the main table, keyed by name; ``rnd()`` is the round index."""
    clients = [c["token"] for c in state["clients"]]
    senders = [p["sender"]["token"] for p in state["pairs"]]
    spread = state["rooms"]["spread"]
    message = json.dumps({"body": MESSAGE_BODY}).encode()
    read_room = state["read_room"]
    read_head = state["read_head"]
    starts = itertools.count()

    def floor(c: Client, k: int, i: int) -> str:
        return _expect(*c.request("GET", "/api/v1/sessions/current/", clients[k]), 200)

    def check_idle(c: Client, k: int, i: int) -> str:
        status, data = c.request("GET", "/api/v1/notes/", clients[k])
        if status == 200 and b'"notes":[]' not in data:
            return f"an idle check received notes: {data[:200]!r}"
        return _expect(status, data, 200)

    def send_busy(c: Client, k: int, i: int) -> str:
        slug = f"busy-{rnd()}"
        path = f"/api/v1/rooms/{slug}/messages/"
        return _expect(*c.request("POST", path, clients[k], message), 201)

    def send_spread(c: Client, k: int, i: int) -> str:
        path = f"/api/v1/rooms/{spread[i % len(spread)]}/messages/"
        return _expect(*c.request("POST", path, clients[k], message), 201)

    def read(c: Client, k: int, i: int) -> str:
        after = random.randrange(0, read_head - 50)
        path = f"/api/v1/rooms/{read_room}/messages/?after_seq={after}&limit=50"
        status, data = c.request("GET", path, clients[k])
        if status == 200 and i % 100 == 0:
            got = len(json.loads(data)["events"])
            if got != 50:
                return f"read_messages returned {got} events, not 50"
        return _expect(status, data, 200)

    def leave_note(c: Client, k: int, i: int) -> str:
        to, tag = pool.recipient(i)
        body = json.dumps({"to": to, "body": f"{NOTE_BODY} {tag}"}).encode()
        status, data = c.request("POST", "/api/v1/notes/", senders[k], body)
        if status == 201:
            pool.left[i] = tag
        return _expect(status, data, 201)

    def check_pending(c: Client, k: int, i: int) -> str:
        return pool.check(c, i)

    def session_start(c: Client, k: int, i: int) -> str:
        name = f"start-{next(starts)}-{os.getpid()}"
        body = json.dumps({"workspace": state["workspace"], "name": name}).encode()
        return _expect(*c.request("POST", "/api/v1/sessions/", state["key"], body), 201)

    return {
        "floor": floor,
        "send_busy": send_busy,
        "send_spread": send_spread,
        "read_messages": read,
        "leave_note": Op(leave_note, limit=pool.room_for_leaves),
        "check_pending": Op(check_pending, limit=pool.ready_to_check, after=pool.collect),
        "session_start": session_start,
        "check_idle": check_idle,
    }


LABELS = {
    "floor": "floor: GET sessions/current (auth + notes envelope)",
    "send_busy": "send_message, one busy room",
    "send_spread": "send_message, spread over 50 rooms",
    "read_messages": "read_messages (limit 50)",
    "leave_note": "leave_note to a connected name",
    "check_pending": "check_messages delivering one note",
    "session_start": "session_start",
    "check_idle": "check_messages, nothing pending",
}


def growth_operations(
    state: dict[str, Any], head: Callable[[], int], *, search: bool = True
) -> dict[str, Operation]:
    """check_messages, read_messages and send_message in the history room; with
    ``search``, the search phase's two queries, asked by the room's reader."""
    growth = state["growth"]
    room = state["history_room"]
    message = json.dumps({"body": MESSAGE_BODY}).encode()

    def check(c: Client, k: int, i: int) -> str:
        status, data = c.request("GET", "/api/v1/notes/", growth["checker"]["token"])
        if status == 200 and b'"notes":[]' not in data:
            return f"the growth checker received notes: {data[:200]!r}"
        return _expect(status, data, 200)

    def read(c: Client, k: int, i: int) -> str:
        after = random.randrange(0, max(1, head() - 50))
        path = f"/api/v1/rooms/{room}/messages/?after_seq={after}&limit=50"
        return _expect(*c.request("GET", path, growth["reader"]["token"]), 200)

    def send(c: Client, k: int, i: int) -> str:
        path = f"/api/v1/rooms/{room}/messages/"
        return _expect(*c.request("POST", path, growth["sender"]["token"], message), 201)

    ops: dict[str, Operation] = {
        "check_messages": check,
        "read_messages": read,
        "send_message": send,
    }
    if search:
        ops["search"] = _search_op(growth["reader"]["token"], TWO_WORD_QUERY)
        ops["search_broad"] = _search_op(growth["reader"]["token"], BROAD_QUERY)
    return ops


def _search_op(token: str, q: str) -> Operation:
    """``GET /api/v1/search/`` of ``q``, a page of 20 with snippets, as the REST client asks."""
    path = "/api/v1/search/?" + urlencode({"q": q, "limit": 20})

    def search(c: Client, k: int, i: int) -> str:
        status, data = c.request("GET", path, token)
        if status == 200 and i == 0 and b'"results":[' not in data:
            return f"search answered no results list: {data[:200]!r}"
        return _expect(status, data, 200)

    return search


class RoundClock:
    """Which busy room a send goes to: one fresh room per round, another for warm-up."""

    def __init__(self) -> None:
        self.round: int | str = "warm"

    def __call__(self) -> int | str:
        return self.round
