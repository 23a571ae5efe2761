"""Search (SPEC §9): what a session may read that matches a query, best matches first.

Who may read what is decided here, in the one query that finds the page:

* a message, if the caller is a current member of its room (a room it left
  is out) and the message is not hidden;
* a note, if the caller's name takes part in its thread.

Each kind is matched in its own index (``rooms.models.MESSAGE_INDEX``,
``mailbox.models.NOTE_INDEX``), joined to the rows and to the caller's
memberships or participations; the two are merged by score, and the page
fetches the rows it shows (ids, room or thread, author, body) in the same
statement. One statement per page, however many rows match.

**Ranking.** SQLite ranks by FTS5's bm25, PostgreSQL by ``ts_rank``
(normalised by length), each as a whole number, higher first; ties go to the
newest. Only the newest ``limits.SEARCH_RANKED_MAX`` matches of each kind on
the server (of those the room, author and time filters keep, when given)
are ranked, readable or not, so the cost of a search is bounded however much
of history it matches: a broad query is answered from recent history, and a
narrower one (more words, ``before``) reaches further back.

**Cursor.** Opaque: the score, kind and id of the page's last result, the
highest message and note ids when the first page was read, and a hash of the
query and filters. Later pages see the texts as of the first page (anything
sent since is left out), so new writes neither push results onto the next
page nor pull them back; a message hidden, or a room left, in between is
gone at once. (On SQLite bm25 weighs words by their frequency in the whole
index, new texts included, so scores drift a little as texts are added: a
result whose score ties with the page's last one to a few millionths could
show on both pages, or on neither.)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import QuerySet
from django.db.models.expressions import RawSQL

from common import limits
from common.errors import ValidationFailed
from common.fields import MAX_BIGINT, MIN_BIGINT
from common.search.index import SearchIndex, catch_up
from common.search.query import Query, parse
from mailbox.models import NOTE_INDEX, Session
from rooms.errors import NotAMember, RoomNotFound
from rooms.models import MESSAGE_INDEX, Member, Message, Room

MESSAGE, NOTE = 0, 1
KINDS = {MESSAGE: "message", NOTE: "note"}


@dataclass(frozen=True, slots=True)
class Hit:
    """One result: a message (``room``, ``seq``) or a note (``conversation_id``)."""

    kind: str
    public_id: str
    room: str | None
    seq: int | None
    conversation_id: str | None
    name: str | None  # None for plumb's own notes (a system author has no name row)
    workspace: str | None
    project: str | None
    created_at: datetime
    body: str
    author_kind: str  # agent, human or system (SPEC §1)


@dataclass(frozen=True)
class SearchPage:
    query: Query
    hits: list[Hit]
    has_more: bool
    cursor: str | None


@dataclass(frozen=True)
class _Position:
    """Where the next page starts, and the high-water ids the first page saw."""

    score: int
    kind: int
    id: int
    messages_upto: int
    notes_upto: int


def search_asked(session: Session, asked: Mapping[str, Any]) -> SearchPage:
    """The search a validated ``SearchInput`` asks for: REST and MCP read it alike.

    The input names the author ``from``, as the API does (SPEC §9).
    """
    return search_for_session(
        session,
        q=asked["q"],
        room=asked.get("room"),
        author=asked.get("from"),
        after=asked.get("after"),
        before=asked.get("before"),
        limit=asked["limit"],
        cursor=asked.get("cursor"),
    )


def search_for_session(
    session: Session,
    *,
    q: str,
    room: str | None = None,
    author: str | None = None,
    after: datetime | None = None,
    before: datetime | None = None,
    limit: int = limits.SEARCH_PAGE_DEFAULT,
    cursor: str | None = None,
) -> SearchPage:
    """A page of what ``session`` may read that matches ``q``, best first.

    ``room`` keeps the messages of that room (no notes); ``author`` what that
    name wrote; ``after`` and ``before`` what was written strictly between.
    Raises ``invalid_query`` (``common.search.query``), ``validation_error``
    for a cursor that is not one of this search's, and, when a ``room``
    search finds nothing, ``room_not_found`` or ``not_a_member`` if that is why.
    """
    query = parse(q)
    binding = _binding(q, room, author, after, before)
    position = _decode(cursor, binding) if cursor is not None else None
    # Index upkeep, not a change anyone sees: SQLite's queued words join the
    # index first, so that every text stored before this call is found.
    catch_up([MESSAGE_INDEX] if room is not None else [MESSAGE_INDEX, NOTE_INDEX])
    sql, params = _page_sql(
        query, session, room=room, author=author, after=after, before=before,
        limit=limit, position=position,
    )  # fmt: skip
    with connection.cursor() as c:
        c.execute(sql, params)
        rows = c.fetchall()
    if not rows and room is not None:
        _check_room(session, room)
    has_more = len(rows) > limit
    rows = rows[:limit]
    next_cursor = None
    if has_more:
        last = rows[-1]
        messages_upto, notes_upto = (
            (position.messages_upto, position.notes_upto)
            if position is not None
            else (last[12] or 0, last[13] or 0)
        )
        next_cursor = _encode(
            _Position(last[1], last[0], last[2], messages_upto, notes_upto), binding
        )
    return SearchPage(
        query=query, hits=[_hit(row) for row in rows], has_more=has_more, cursor=next_cursor
    )


def messages_matching(messages: QuerySet[Message], query: Query) -> QuerySet[Message]:
    """``messages`` narrowed to those whose body matches ``query``, hidden ones included:
    the operators' search (the admin), through the same index as the agents'."""
    MESSAGE_INDEX.catch_up()  # SQLite's queued words first (common/search/index.py)
    sql, params = MESSAGE_INDEX.matching_ids(query, vendor=connection.vendor)
    return messages.filter(pk__in=RawSQL(sql, params))


def _check_room(session: Session, slug: str) -> None:
    """Why a search of room ``slug`` found nothing, if it is not an empty result."""
    room = Room.objects.filter(slug=slug).first()
    if room is None:
        raise RoomNotFound(f"No room is named {slug!r}.")
    if not Member.objects.filter(room=room, name_id=session.name_id, left_at__isnull=True).exists():
        raise NotAMember()


def _hit(row: tuple) -> Hit:
    kind, _, _, public_id, room, seq, conversation_id, name, workspace, project, created, body = (
        row[:12]
    )
    return Hit(
        author_kind=row[14],
        kind=KINDS[kind],
        public_id=public_id,
        room=room,
        seq=seq,
        conversation_id=conversation_id,
        name=name,
        workspace=workspace,
        project=project,
        created_at=_datetime(created),
        body=body,
    )


def _datetime(value: Any) -> datetime:
    # Raw SQL skips the ORM's converters: SQLite hands back its stored text.
    convert = getattr(connection.ops, "convert_datetimefield_value", None)
    return convert(value, None, connection) if convert is not None else value


# --- the statement ----------------------------------------------------------------------


def _page_sql(
    query: Query,
    session: Session,
    *,
    room: str | None,
    author: str | None,
    after: datetime | None,
    before: datetime | None,
    limit: int,
    position: _Position | None,
) -> tuple[str, list[Any]]:
    vendor = connection.vendor
    adapt = connection.ops.adapt_datetimefield_value
    params: list[Any] = []

    ranked = limits.SEARCH_RANKED_MAX

    def filters_on(alias: str, kind: int, author_column: str) -> tuple[str, list[Any]]:
        sql, values = "", []
        if author is not None:
            sql += f" AND {alias}.{author_column} = "
            sql += "(SELECT id FROM mailbox_agentname WHERE handle = %s)"
            values.append(author)
        if after is not None:
            sql += f" AND {alias}.created_at > %s"
            values.append(adapt(after))
        if before is not None:
            sql += f" AND {alias}.created_at < %s"
            values.append(adapt(before))
        if kind == MESSAGE and room is not None:
            sql += f" AND {alias}.room_id = (SELECT id FROM rooms_room WHERE slug = %s)"
            values.append(room)
        return sql, values

    def kind_sql(
        kind: int, table: str, index: SearchIndex, readable: str, author_column: str, upto: int
    ) -> str:
        # Which matches are ranked: the newest SEARCH_RANKED_MAX of the server's
        # (of those the filters keep, when there are filters), readable or not.
        # Only the readable among them are joined to their rows and scored.
        hidden = " AND t.hidden_at IS NULL" if kind == MESSAGE else ""
        inner_filters, inner_params = filters_on("b", kind, author_column)
        if vendor == "postgresql":
            newest, newest_params = index.newest_matches(query, filters=inner_filters)
            params.extend(newest_params)  # the score's tsquery, the same one
            params.extend([*newest_params, upto, *inner_params, ranked, session.name_id])
            return (
                f"SELECT {kind} AS kind, t.id AS id, "
                "CAST(ts_rank(c.document, %s::tsquery, 1) * 1000000 AS bigint) AS score "
                f"FROM ({newest}) c JOIN {table} t ON t.id = c.id {readable} WHERE TRUE{hidden}"
            )
        # SQLite: where the newest SEARCH_RANKED_MAX matches begin, found by
        # walking the FTS5 table alone, newest first, and the matches from
        # there joined to their rows; bm25 is worked out for the readable only.
        match = index.matches(query, alias="t")
        filters, filter_params = filters_on("t", kind, author_column)
        if filters:
            inner = index.matches(query, alias="b")
            bound = (
                f"(SELECT b.id FROM {table} b {inner.joins} WHERE {inner.where} AND "
                f"{inner.id} <= %s{inner_filters} ORDER BY {inner.id} DESC LIMIT 1 OFFSET %s)"
            )
            bound_params = [*inner.where_params, upto, *inner_params, ranked - 1]
        else:
            bound, bound_sql_params = index.nth_newest(query)
            bound_params = [*bound_sql_params, upto, ranked - 1]
        params.extend([session.name_id, *match.where_params, upto, *bound_params])
        params.extend(filter_params)
        return (
            f"SELECT {kind} AS kind, t.id AS id, {match.score} AS score "
            f"FROM {table} t {match.joins} {readable} "
            f"WHERE {match.where} AND {match.id} <= %s AND {match.id} >= COALESCE({bound}, 0)"
            f"{filters}{hidden}"
        )

    upto_messages = position.messages_upto if position else MAX_BIGINT
    upto_notes = position.notes_upto if position else MAX_BIGINT
    parts = [
        kind_sql(
            MESSAGE,
            "rooms_message",
            MESSAGE_INDEX,
            "JOIN rooms_member me ON me.room_id = t.room_id AND me.name_id = %s "
            "AND me.left_at IS NULL",
            "author_id",
            upto_messages,
        )
    ]
    if room is None:
        parts.append(
            kind_sql(
                NOTE,
                "mailbox_note",
                NOTE_INDEX,
                "JOIN mailbox_participant me ON me.conversation_id = t.conversation_id "
                "AND me.name_id = %s",
                "sender_name_id",
                upto_notes,
            )
        )
    after_position = "1 = 1"
    if position is not None:
        after_position = "(score < %s OR (score = %s AND (kind > %s OR (kind = %s AND id < %s))))"
        params += [position.score, position.score, position.kind, position.kind, position.id]
    params.append(limit + 1)
    sql = f"""
        WITH hits AS ({" UNION ALL ".join(parts)}),
        page AS (
            SELECT kind, id, score FROM hits WHERE {after_position}
            ORDER BY score DESC, kind, id DESC LIMIT %s
        )
        SELECT page.kind, page.score, page.id,
            COALESCE(m.public_id, n.public_id), r.slug, m.seq, c.public_id,
            a.handle, w.slug, p.slug,
            COALESCE(m.created_at, n.created_at), COALESCE(m.body, n.body),
            (SELECT MAX(id) FROM rooms_message), (SELECT MAX(id) FROM mailbox_note),
            COALESCE(a.kind, n.sender_kind)
        FROM page
        LEFT JOIN rooms_message m ON page.kind = {MESSAGE} AND m.id = page.id
        LEFT JOIN rooms_room r ON r.id = m.room_id
        LEFT JOIN mailbox_note n ON page.kind = {NOTE} AND n.id = page.id
        LEFT JOIN mailbox_conversation c ON c.id = n.conversation_id
        LEFT JOIN mailbox_agentname a ON a.id = COALESCE(m.author_id, n.sender_name_id)
        LEFT JOIN mailbox_workspace w ON w.id = a.workspace_id
        LEFT JOIN mailbox_project p ON p.id = w.project_id
        ORDER BY page.score DESC, page.kind, page.id DESC
    """
    return sql, params


# --- cursors ----------------------------------------------------------------------------


def _binding(
    q: str, room: str | None, author: str | None, after: datetime | None, before: datetime | None
) -> str:
    """What a cursor belongs to: this query with these filters, and no other."""
    key = json.dumps([q, room, author, after and after.isoformat(), before and before.isoformat()])
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def _encode(position: _Position, binding: str) -> str:
    fields = [position.score, position.kind, position.id, position.messages_upto]
    fields += [position.notes_upto, binding]
    raw = json.dumps(fields, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(cursor: str, binding: str) -> _Position:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        score, kind, pk, messages_upto, notes_upto, bound = json.loads(raw)
    except (binascii.Error, ValueError, TypeError, UnicodeDecodeError):
        raise _bad_cursor("Use the cursor of the previous page as it was returned.") from None
    numbers = (score, kind, pk, messages_upto, notes_upto)
    if not all(type(n) is int and MIN_BIGINT <= n <= MAX_BIGINT for n in numbers) or (
        kind not in KINDS
    ):
        raise _bad_cursor("Use the cursor of the previous page as it was returned.")
    if bound != binding:
        raise _bad_cursor(
            "This cursor belongs to another search: repeat the query and filters it came with."
        )
    return _Position(score, kind, pk, messages_upto, notes_upto)


def _bad_cursor(message: str) -> ValidationFailed:
    return ValidationFailed.field("cursor", message)
