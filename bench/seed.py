"""Database side of the benchmark: seeding, query counts and query plans.

Run by ``bench/run.py`` in a subprocess with ``DJANGO_SETTINGS_MODULE`` and
``DATABASE_URL`` set, against the same database the benchmark server uses:

    python bench/seed.py setup  --clients 8 --rounds 5 --pool 1500  # keys, sessions, rooms
    python bench/seed.py grow   --state S --rows N [--no-index]  # bulk top-up to N notes/events
    python bench/seed.py queries --state S [--explain]      # queries per operation

Identity rows, rooms and memberships go through plumb's own services, so they
are exactly what the API would have made. Bulk history (room events and
messages, notes and their threads) is written with plain SQL in large
batches (``executemany`` on SQLite, ``COPY`` on PostgreSQL): seeding a million
rows through the API would take longer than the benchmark itself. Its bodies
are varied text (``bench/corpus.py``), and the search index is built for them
after each load (``SearchIndex.fill``), as the services would have kept it.

Every command prints one JSON object on standard output. ``queries`` lives in
``bench/seed_queries.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any

APP_DIR = Path(os.environ.get("BENCH_APP_DIR") or Path(__file__).resolve().parent.parent)
sys.path.insert(0, str(APP_DIR))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "plumb_site.settings")

import django  # noqa: E402

django.setup()

from corpus import BROAD_QUERY, TWO_WORD_QUERY, bodies  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.db.models import Max  # noqa: E402
from django.utils import timezone  # noqa: E402

from mailbox import services  # noqa: E402
from mailbox.models import AgentName, Conversation, Note, Session  # noqa: E402
from rooms import services as room_services  # noqa: E402
from rooms.models import Event, Member, Message, Room  # noqa: E402

try:  # a checkout from before search (bench/compare.py's baseline) has no index to fill
    from common.search.query import parse
    from mailbox.models import NOTE_INDEX
    from rooms.models import MESSAGE_INDEX
    from rooms.selectors.search import messages_matching
except ImportError:
    MESSAGE_INDEX = NOTE_INDEX = None

PROJECT = "bench"
WORKSPACE = "bench"
AWAY_WORKSPACE = "away"  # "next" notes for a workspace nobody attaches to
HISTORY_AUTHOR = "bench-author"
NOTES_PER_THREAD = 100
BATCH = 50_000

IS_POSTGRES = connection.vendor == "postgresql"


def out(payload: dict[str, Any]) -> None:
    json.dump(payload, sys.stdout)
    sys.stdout.write("\n")


# --- identity, rooms and memberships through the services -----------------------------


def _start(key, name: str) -> dict[str, Any]:
    started = services.session_start(key, workspace_slug=WORKSPACE, name=name)
    return {"name": name, "token": started.token, "id": started.session.pk}


def _room(creator: Session, slug: str, members: list[Session]) -> None:
    room_services.room_create(creator, slug=slug, title=slug)
    for member in members:
        if member.pk != creator.pk:
            room_services.room_join(member, slug)


def _session(info: dict[str, Any]) -> Session:
    return Session.objects.select_related("name", "workspace__project").get(pk=info["id"])


def cmd_setup(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    # Its clients post as fast as they can on purpose, as a looping pair of agents
    # would: the flood limit would pause their rooms (the rate limits are off too).
    project = services.project_create(PROJECT, name="Benchmark", room_flood_limit=0)
    services.workspace_create(project, slug=WORKSPACE)
    services.workspace_create(project, slug=AWAY_WORKSPACE)
    key = services.key_create(project, label="bench", created_by="bench")
    clients = [_start(key.key, f"client-{i}") for i in range(args.clients)]
    pairs = [
        {"sender": _start(key.key, f"pair-s-{i}"), "recipient": _start(key.key, f"pair-r-{i}")}
        for i in range(args.clients)
    ]
    growth = {role: _start(key.key, f"g-{role}") for role in ("checker", "reader", "sender")}
    # Recipients of the note phases (one note each per phase) and the wake phase's pollers.
    pool = [_start(key.key, f"agent-{i}") for i in range(args.pool)]
    author = _start(key.key, HISTORY_AUTHOR)

    client_sessions = [_session(c) for c in clients]
    creator = client_sessions[0]
    rooms: dict[str, list[str]] = {"busy": [], "spread": []}
    for label in ["warm", *range(args.rounds), "q"]:
        slug = f"busy-{label}"
        _room(creator, slug, client_sessions)
        rooms["busy"].append(slug)
    for i in range(args.spread):
        slug = f"spread-{i:02d}"
        _room(creator, slug, client_sessions)
        rooms["spread"].append(slug)
    _room(creator, "read", [*client_sessions, _session(author)])
    _bulk_room_history("read", args.read_events)
    _bulk_index()

    growth_sessions = [_session(growth["reader"]), _session(growth["sender"]), _session(author)]
    _room(growth_sessions[0], "history", growth_sessions)

    # The broadcast phase's room: its speaker and the first --hall sessions of the pool,
    # every one of them having read it all, so that each waits for the next message.
    speaker = None
    if args.hall:
        speaker = _start(key.key, "hall-speaker")
        _room(_session(speaker), "hall", [_session(p) for p in pool[: args.hall]])
        hall = Room.objects.get(slug="hall")
        Member.objects.filter(room=hall).update(read_seq=hall.head_seq)

    out(
        {
            "key": key.raw,
            "workspace": WORKSPACE,
            "clients": clients,
            "pairs": pairs,
            "pool": pool,
            "growth": growth,
            "rooms": rooms,
            "read_room": "read",
            "read_head": Room.objects.get(slug="read").head_seq,
            "history_room": "history",
            "hall_room": "hall" if args.hall else None,
            "hall_speaker": speaker,
            "seconds": round(time.perf_counter() - started, 2),
        }
    )


# --- bulk history ------------------------------------------------------------------------


def _columns(model) -> list[str]:
    return [f.column for f in model._meta.concrete_fields]


def _bulk_insert(model, rows) -> int:
    """Insert tuples in column order (``_columns``) in large batches; returns the count.

    On SQLite the table's plain indexes are dropped for the load and rebuilt
    after it, in the same transaction: building an index from sorted rows is
    several times faster than updating a dozen of them row by row. The
    indexes behind UNIQUE constraints stay, so the constraints are checked.
    """
    table = model._meta.db_table
    columns = _columns(model)
    count = 0
    raw = connection.connection
    if IS_POSTGRES:
        names = ", ".join(connection.ops.quote_name(c) for c in columns)
        with raw.cursor() as cursor, cursor.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
                count += 1
        return count
    sql = f'INSERT INTO "{table}" ({", ".join(columns)}) VALUES ({", ".join("?" * len(columns))})'
    cursor = raw.cursor()
    indexes = cursor.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? "
        "AND sql IS NOT NULL AND sql NOT LIKE 'CREATE UNIQUE%'",
        (table,),
    ).fetchall()
    for name, _ in indexes:
        cursor.execute(f'DROP INDEX "{name}"')
    batch: list[tuple] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= BATCH:
            cursor.executemany(sql, batch)
            count += len(batch)
            batch = []
    if batch:
        cursor.executemany(sql, batch)
        count += len(batch)
    for _, create in indexes:
        cursor.execute(create)
    cursor.close()
    return count


# common.ids makes one id this way; bench/ keeps its own table because
# bench/compare.py seeds checkout A with checkout B's bench/, which must not
# import what A may not have.
_B32 = bytes(
    ord("abcdefghijklmnopqrstuvwxyz234567"[b % 32]) for b in range(256)
)  # 256 is a multiple of 32: every letter stays equally likely


def _public_ids(prefix: str, count: int) -> list[str]:
    """``count`` ids shaped like ``common.ids.new_public_id`` (24 base32 letters).

    Generated in bulk (as ``new_public_id`` does, but one call for all) and sorted, so that a
    batch walks each unique index in order instead of jumping around it.
    """
    letters = os.urandom(24 * count).translate(_B32).decode("ascii")
    return sorted(f"{prefix}_{letters[i : i + 24]}" for i in range(0, 24 * count, 24))


def _now_value():
    """A timestamp as the raw driver wants it (SQLite stores naive UTC text)."""
    now = timezone.now()
    return now if IS_POSTGRES else connection.ops.adapt_datetimefield_value(now)


def _next_id(model) -> int:
    return (model.objects.aggregate(top=Max("id"))["top"] or 0) + 1


def _reset_sequences(*models) -> None:
    """PostgreSQL identity sequences do not see explicit ids: move them past the rows."""
    if not IS_POSTGRES:
        return
    from django.core.management.color import no_style

    with connection.cursor() as cursor:
        for statement in connection.ops.sequence_reset_sql(no_style(), list(models)):
            cursor.execute(statement)


def _bulk_room_history(slug: str, count: int) -> int:
    """Append ``count`` message events by the history author, with consistent seqs."""
    if count <= 0:
        return 0
    author = AgentName.objects.get(handle=HISTORY_AUTHOR)
    with transaction.atomic():
        room = Room.objects.select_for_update().get(slug=slug)
        first_seq = room.head_seq + 1
        message_id = _next_id(Message)
        event_id = _next_id(Event)
        now = _now_value()
        assert _columns(Message) == [
            "id", "public_id", "room_id", "seq", "author_id", "author_display_name", "body",
            "ordinal", "author_ordinal", "reply_to_id", "idempotency_key", "mentions",
            "send_report", "created_at", "hidden_at", "hidden_reason",
        ], _columns(Message)  # fmt: skip
        # Ordinals continue the room's and the author's, as message_send's do.
        ordinal = Message.objects.filter(room=room).count()
        author_ordinal = Message.objects.filter(room=room, author=author).count()
        # Reviews took an idempotency key in issue 28: a checkout from before has none.
        keyed = "idempotency_key" in _columns(Event)
        assert _columns(Event) == [
            "id", "room_id", "seq", "kind", "actor_id", "actor_display_name", "message_id",
            "verdict", "body", "data", *(["idempotency_key"] if keyed else []), "created_at",
        ], _columns(Event)  # fmt: skip
        report = '{"unseen_before_send": 0, "unresolved_mentions": [], "mention_warnings": []}'
        texts = bodies(seed=first_seq)
        _bulk_insert(
            Message,
            (
                (message_id + i, public_id, room.pk, first_seq + i, author.pk, "",
                 next(texts), ordinal + i + 1, author_ordinal + i + 1,
                 None, None, "[]", report, now, None, "")
                for start in range(0, count, BATCH)
                for i, public_id in enumerate(
                    _public_ids("msg", min(BATCH, count - start)), start
                )
            ),
        )  # fmt: skip
        _bulk_insert(
            Event,
            (
                (event_id + i, room.pk, first_seq + i, "message", author.pk, "",
                 message_id + i, "", "", "{}", *([None] if keyed else []), now)
                for i in range(count)
            ),
        )  # fmt: skip
        Room.objects.filter(pk=room.pk).update(head_seq=first_seq + count - 1)
        # Members of the history room have read it all: a send then counts no
        # unseen messages, as for an agent that keeps up with its room.
        Member.objects.filter(room=room).update(read_seq=first_seq + count - 1)
    _reset_sequences(Message, Event)
    return count


def _bulk_notes(count: int, checker: Session) -> int:
    """``count`` notes: half delivered to the checker, most of the rest delivered to
    peers, 1 in 100 still pending (for absent names and a "next" of another workspace)."""
    if count <= 0:
        return 0
    workspace = checker.workspace
    away = workspace.project.workspaces.get(slug=AWAY_WORKSPACE)
    author = AgentName.objects.get(handle=HISTORY_AUTHOR)
    peers = [
        AgentName.objects.get_or_create(handle=f"g-peer-{i}", defaults={"workspace": workspace})[0]
        for i in range(10)
    ]
    absent = [
        AgentName.objects.get_or_create(handle=f"g-absent-{i}", defaults={"workspace": workspace})[
            0
        ]
        for i in range(10)
    ]
    threads = (count + NOTES_PER_THREAD - 1) // NOTES_PER_THREAD
    with transaction.atomic():
        conversation_id = _next_id(Conversation)
        note_id = _next_id(Note)
        now = _now_value()
        assert _columns(Conversation) == [
            "id", "public_id", "cap", "notes_count", "last_position", "created_at",
            "last_note_at", "locked_at",
        ], _columns(Conversation)  # fmt: skip
        assert _columns(Note) == [
            "id", "public_id", "conversation_id", "position", "sender_name_id", "sender_kind",
            "sender_session_id", "recipient_id", "next_workspace_id", "body", "created_at",
            "idempotency_key", "delivery", "bound_session_id", "delivered_to_id",
            "delivered_at", "bounced_at", "bounce_of_id", "claim",
        ], _columns(Note)  # fmt: skip

        def conversation_rows():
            for t, public_id in enumerate(_public_ids("cnv", threads)):
                size = min(NOTES_PER_THREAD, count - t * NOTES_PER_THREAD)
                yield (conversation_id + t, public_id, NOTES_PER_THREAD, size, size,
                       now, now, None)  # fmt: skip

        def note_rows():
            texts = bodies(seed=-note_id)
            public_ids: list[str] = []
            claims: list[str] = []
            for i in range(count):
                if not public_ids:
                    public_ids = _public_ids("note", min(BATCH, count - i))[::-1]
                    # Claim tokens are 32 hex digits, one per claim, in the claim index.
                    claims = sorted(secrets.token_hex(16) for _ in range(len(public_ids)))[::-1]
                thread, position = divmod(i, NOTES_PER_THREAD)
                recipient, next_ws, delivery = author.pk, None, "name"
                bound = delivered_to = delivered_at = claim = None
                if i % 100 == 99:  # still pending, for someone who is not here
                    if i % 200 == 199:
                        recipient, next_ws, delivery = None, away.pk, "next"
                    else:
                        recipient = absent[i % len(absent)].pk
                elif i % 2 == 0:  # delivered to the checking session
                    recipient, delivery = checker.name_id, "session"
                    bound = delivered_to = checker.pk
                    delivered_at, claim = now, claims.pop()
                else:  # delivered to a peer whose session is gone
                    recipient = peers[i % len(peers)].pk
                    delivered_at, claim = now, claims.pop()
                yield (note_id + i, public_ids.pop(), conversation_id + thread,
                       position + 1, author.pk, "agent", None, recipient, next_ws,
                       next(texts), now, None, delivery, bound,
                       delivered_to, delivered_at, None, None, claim)  # fmt: skip

        _bulk_insert(Conversation, conversation_rows())
        _bulk_insert(Note, note_rows())
    _reset_sequences(Conversation, Note)
    return count


def _bulk_index() -> float:
    """Index every message and note that has no index row yet; returns the seconds.

    On PostgreSQL the GIN index is dropped first and built once at the end
    (``SearchIndex.fill``): several times faster than a million inserts into it.
    """
    started = time.perf_counter()
    if MESSAGE_INDEX is None:
        return 0.0
    for index in (MESSAGE_INDEX, NOTE_INDEX):
        if IS_POSTGRES:
            with connection.cursor() as cursor:
                cursor.execute(f'DROP INDEX IF EXISTS "{index.table}_document"')
        with transaction.atomic():
            index.fill(connection, batch=BATCH)
    return time.perf_counter() - started


def _search_matches(room: Room) -> dict[str, dict[str, Any]]:
    """The search phase's queries and how many messages of ``room`` each matches."""
    messages = Message.objects.filter(room=room)
    return {
        name: {"q": q, "matches": messages_matching(messages, parse(q)).count()}
        for name, q in (("search", TWO_WORD_QUERY), ("search_broad", BROAD_QUERY))
    }


def cmd_grow(args: argparse.Namespace) -> None:
    """Top the history room's events and the notes table up to ``--rows`` each."""
    state = json.loads(Path(args.state).read_text())
    started = time.perf_counter()
    room = Room.objects.get(slug=state["history_room"])
    have_events = Event.objects.filter(room=room).count()
    have_notes = Note.objects.count()
    checker = _session(state["growth"]["checker"])
    if not IS_POSTGRES:
        # Random public ids land all over their unique indexes: with SQLite's
        # default 2 MB page cache a million-row load spends its time re-reading
        # index pages. Only this seeding connection gets the big cache.
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA cache_size = -1048576")
            # The bulk load is one transaction that the benchmark can redo:
            # it needs no fsync (the server's own connections keep NORMAL).
            cursor.execute("PRAGMA synchronous = OFF")
    events = _bulk_room_history(room.slug, args.rows - have_events)
    events_seconds = time.perf_counter() - started
    notes = _bulk_notes(args.rows - have_notes, checker)
    indexed = not args.no_index and MESSAGE_INDEX is not None
    index_seconds = _bulk_index() if indexed else 0.0
    seeded = time.perf_counter() - started
    if IS_POSTGRES:
        # Autovacuum would vacuum and analyse these tables soon after a bulk
        # load; do it now, so that the planner sees the sizes the benchmark
        # claims to measure and the first reads do not pay for setting hint
        # bits on a million fresh rows.
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")
    out(
        {
            "rows": args.rows,
            "events_added": events,
            "notes_added": notes,
            "events_total": Event.objects.count(),
            "messages_total": Message.objects.count(),
            "notes_total": Note.objects.count(),
            "seconds": round(seeded, 2),
            "events_seconds": round(events_seconds, 2),
            "index_seconds": round(index_seconds, 2),
            "search": _search_matches(room) if indexed else {},
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    setup = sub.add_parser("setup")
    setup.add_argument("--clients", type=int, default=8)
    setup.add_argument("--rounds", type=int, default=5)
    setup.add_argument("--spread", type=int, default=50)
    setup.add_argument("--read-events", type=int, default=5000)
    setup.add_argument("--pool", type=int, default=0, help="recipient sessions agent-<i>")
    setup.add_argument("--hall", type=int, default=0, help="pool sessions in the room 'hall'")
    grow = sub.add_parser("grow")
    grow.add_argument("--state", required=True)
    grow.add_argument("--rows", type=int, required=True)
    grow.add_argument("--no-index", action="store_true", help="skip the search index")
    queries = sub.add_parser("queries")
    queries.add_argument("--state", required=True)
    queries.add_argument("--explain", action="store_true")
    queries.add_argument("--growth", action="store_true")
    args = parser.parse_args()
    if args.command == "queries":
        from seed_queries import cmd_queries  # once Django is set up

        cmd_queries(args)
        return
    {"setup": cmd_setup, "grow": cmd_grow}[args.command](args)


if __name__ == "__main__":
    main()
