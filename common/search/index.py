"""The full-text index of a table of texts, on SQLite (FTS5) and PostgreSQL (tsvector).

Each indexed table (messages, notes) has an index table of its own beside it,
one row per text, keyed by the text's id:

* **SQLite**: an FTS5 table, ``rowid`` = the text's id, one column
  ``document`` holding ``common.search.text.document(body)``. Its ``ascii``
  tokenizer splits at the spaces that document puts between words and at
  nothing else (FTS5 counts every non-ASCII character as part of a word).
* **PostgreSQL**: a plain table (``<key>`` = the text's id, ``document
  tsvector``) with a GIN index. The ``tsvector`` is written as a literal built
  here from the same words, positions included: no text-search
  configuration, parser or dictionary touches it, so the two databases hold
  the same words at the same positions.

Rows are written by the services that store texts, in the same transaction
(``insert_prepared``). Rows of texts that are deleted go with them, by
triggers on the source table on both databases (row by row on SQLite; per
statement, and on TRUNCATE, on PostgreSQL), so a retention purge deletes
texts and nothing else. Searches join the index to the source table, so a
text that is gone is never found, whatever the index holds.

**SQLite's queue.** FTS5 writes a new segment of its index at every commit
that touched it, about 0.15 ms here, under the write lock that every writer
of a SQLite database waits for, in a send that otherwise holds it for well
under a millisecond: sends per second would drop by a quarter. So on
SQLite a text's words go first into ``<table>_pending``, a plain table (one
small insert in the send's transaction), and move into the FTS5 table in
batches: by a trigger, in the transaction of every
``QUEUE_BATCH``-th text, and by ``catch_up``, which every search runs before
it reads (a read, and a write only when something waits). A text is
therefore found by any search that starts after the call that stored it
returned, and rarely more than ``QUEUE_BATCH`` texts wait. PostgreSQL's GIN
index batches its own writes (``fastupdate``), so there the row goes in
directly.

Queries reach the database as a compiled form of ``common.search.query``'s
tree: an FTS5 MATCH string in which every word is a quoted string, or a
``tsquery`` literal of quoted lexemes. User text is never FTS syntax.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.db import connections

from common.search.query import Query, Term
from common.search.text import document, words

# PostgreSQL keeps at most this many positions per lexeme, and no position past
# the last one here; FTS5 keeps them all. A phrase is found on both while its
# words sit within the first 16,383 words of a text, and each word of it among
# that word's first 256 occurrences.
_PG_POSITIONS_PER_WORD = 256
_PG_POSITION_MAX = 16383

# On SQLite, the transaction of every text whose id is a multiple of this moves
# the queued words into FTS5 (see "SQLite's queue" above).
QUEUE_BATCH = 64


@dataclass(frozen=True)
class SearchIndex:
    """The index table ``table`` of the texts in ``source.body``.

    ``key``: the column of the index table that holds the text's id on
    PostgreSQL (on SQLite it is the FTS5 ``rowid``).
    """

    table: str
    source: str
    key: str

    # --- writing ---------------------------------------------------------------------

    def prepare(self, text: str, *, using: str = "default") -> str:
        """What ``insert_prepared`` writes for ``text``: its words, in this database's form.

        Milliseconds for a 16 KB body: services call it before they take a lock.
        """
        return _prepared(text, connections[using].vendor)

    def insert_prepared(
        self, pk: int, prepared: str, *, cursor: Any, using: str = "default"
    ) -> None:
        """Index text ``pk`` on ``cursor``, in the caller's transaction: one statement,
        the row on PostgreSQL, the queued row on SQLite."""
        cursor.execute(self._insert_sql(using), [pk, prepared])

    def insert_with(self, writes: Any, key: Any, prepared: str) -> None:
        """``insert_prepared`` as one of ``writes`` (``common.prepared.Writes``).

        ``key``: the text's id, or a ``Ref`` to the text when ``writes`` inserts it.
        """
        writes.execute(self._insert_sql(writes.using), [key, prepared])

    def _insert_sql(self, using: str) -> str:
        if connections[using].vendor == "postgresql":
            return f'INSERT INTO "{self.table}" ("{self.key}", document) VALUES (%s, %s::tsvector)'
        return f'INSERT INTO "{self.pending}" (id, document) VALUES (%s, %s)'

    @property
    def pending(self) -> str:
        """SQLite's queue of words on their way into the FTS5 table."""
        return f"{self.table}_pending"

    def catch_up(self, using: str = "default") -> None:
        catch_up([self], using=using)

    # --- creating and filling ------------------------------------------------------------

    def create(self, schema_editor: Any) -> None:
        """Create the index table and the triggers that delete rows with their texts.

        The GIN index is not created here: ``fill`` builds it once the rows are in.
        """
        t, s, k = self.table, self.source, self.key
        if schema_editor.connection.vendor == "postgresql":
            statements = [
                f'CREATE TABLE "{t}" ("{k}" bigint PRIMARY KEY, document tsvector NOT NULL)',
                # Per statement, through the deleted rows: a purge of thousands
                # of texts deletes their index rows in one statement.
                f'CREATE FUNCTION "{t}_forget"() RETURNS trigger LANGUAGE plpgsql AS $$ '
                f'BEGIN DELETE FROM "{t}" WHERE "{k}" IN (SELECT id FROM gone); '
                "RETURN NULL; END $$",
                f'CREATE TRIGGER "{t}_forget" AFTER DELETE ON "{s}" REFERENCING OLD TABLE AS '
                f'gone FOR EACH STATEMENT EXECUTE FUNCTION "{t}_forget"()',
                # No foreign key: one would refuse a TRUNCATE of the texts (as
                # Django's test flush runs) unless it named this table too.
                f'CREATE FUNCTION "{t}_truncate"() RETURNS trigger LANGUAGE plpgsql AS $$ '
                f'BEGIN TRUNCATE "{t}"; RETURN NULL; END $$',
                f'CREATE TRIGGER "{t}_truncate" AFTER TRUNCATE ON "{s}" '
                f'FOR EACH STATEMENT EXECUTE FUNCTION "{t}_truncate"()',
            ]
        else:
            q = self.pending
            statements = [
                f"CREATE VIRTUAL TABLE \"{t}\" USING fts5(document, tokenize = 'ascii')",
                f'CREATE TABLE "{q}" (id INTEGER PRIMARY KEY, document TEXT NOT NULL)',
                # Leaving the queue is entering the index: deleting queued rows
                # (catch_up, the batch below) moves them, one statement for all.
                f'CREATE TRIGGER "{q}_move" BEFORE DELETE ON "{q}" BEGIN '
                f'INSERT INTO "{t}" (rowid, document) VALUES (OLD.id, OLD.document); END',
                f'CREATE TRIGGER "{q}_batch" AFTER INSERT ON "{q}" '
                f'WHEN NEW.id % {QUEUE_BATCH} = 0 BEGIN DELETE FROM "{q}"; END',
                # A deleted text leaves the queue (into the index) and then the
                # index. Django rebuilds a SQLite table for some schema changes,
                # and the rebuild drops its triggers: tests/common/
                # test_search_index.py deletes texts and looks for their rows,
                # so a lost trigger is noticed.
                f'CREATE TRIGGER "{t}_forget" AFTER DELETE ON "{s}" BEGIN '
                f'DELETE FROM "{q}" WHERE id = OLD.id; '
                f'DELETE FROM "{t}" WHERE rowid = OLD.id; END',
            ]
        for statement in statements:
            schema_editor.execute(statement, params=None)

    def drop(self, schema_editor: Any) -> None:
        t = self.table
        if schema_editor.connection.vendor == "postgresql":
            statements = [
                f'DROP TRIGGER IF EXISTS "{t}_forget" ON "{self.source}"',
                f'DROP TRIGGER IF EXISTS "{t}_truncate" ON "{self.source}"',
                f'DROP FUNCTION IF EXISTS "{t}_forget"()',
                f'DROP FUNCTION IF EXISTS "{t}_truncate"()',
                f'DROP TABLE IF EXISTS "{t}"',
            ]
        else:
            statements = [
                f'DROP TRIGGER IF EXISTS "{t}_forget"',
                f'DROP TABLE IF EXISTS "{self.pending}"',  # its triggers go with it
                f'DROP TABLE IF EXISTS "{t}"',
            ]
        for statement in statements:
            schema_editor.execute(statement, params=None)

    def fill(self, connection: Any, *, batch: int = 2000) -> int:
        """Index every text of ``source`` that has no row yet, ``batch`` at a time, by id.

        For the migration that creates the index (so that an upgraded server
        finds old history) and for bulk loads. Memory stays flat: one batch of
        bodies at a time. Builds the GIN index on PostgreSQL if it is missing,
        and merges FTS5's segments on SQLite. Returns how many texts it indexed.
        """
        vendor = connection.vendor
        if vendor != "postgresql":
            self.catch_up(connection.alias)  # queued rows count as indexed below
        done = 0
        with connection.cursor() as cursor:
            for rows in self._unindexed(cursor, vendor, batch):
                prepared = [(pk, _prepared(body, vendor)) for pk, body in rows]
                if vendor == "postgresql":
                    # COPY reads each tsvector literal as an INSERT would, many times faster.
                    copying = f'COPY "{self.table}" ("{self.key}", document) FROM STDIN'
                    with cursor.copy(copying) as copy:
                        for row in prepared:
                            copy.write_row(row)
                else:
                    cursor.executemany(
                        f'INSERT INTO "{self.table}" (rowid, document) VALUES (%s, %s)', prepared
                    )
                done += len(prepared)
            if vendor == "postgresql":
                cursor.execute(
                    f'CREATE INDEX IF NOT EXISTS "{self.table}_document" ON "{self.table}" '
                    "USING gin (document)"
                )
            else:
                cursor.execute(f'INSERT INTO "{self.table}" ("{self.table}") VALUES (\'optimize\')')
        return done

    def _unindexed(self, cursor: Any, vendor: str, batch: int) -> Iterator[list[tuple[int, str]]]:
        indexed = "rowid" if vendor != "postgresql" else f'"{self.key}"'
        after = 0
        while True:
            cursor.execute(
                f'SELECT s.id, s.body FROM "{self.source}" s WHERE s.id > %s AND NOT EXISTS '
                f'(SELECT 1 FROM "{self.table}" i WHERE i.{indexed} = s.id) ORDER BY s.id LIMIT %s',
                [after, batch],
            )
            rows = cursor.fetchall()
            if not rows:
                return
            yield rows
            after = rows[-1][0]

    # --- searching -------------------------------------------------------------------

    def matches(self, query: Query, *, alias: str) -> Match:
        """SQLite: how a search joins this FTS5 table to rows of ``source`` aliased ``alias``."""
        return Match(
            joins=f'JOIN "{self.table}" ON "{self.table}".rowid = {alias}.id',
            where=f'"{self.table}" MATCH %s',
            where_params=[fts5_match(query)],
            # bm25 is lower for better matches; in millionths, so that a
            # cursor compares whole numbers.
            score=f'CAST(-"{self.table}".rank * 1000000 AS INTEGER)',
            id=f'"{self.table}".rowid',
        )

    def nth_newest(self, query: Query) -> tuple[str, list[Any]]:
        """SQLite: a scalar subquery, the id of the (n+1)-th newest text matching
        ``query``, or NULL; after the query's parameter, two placeholders: the
        highest id to consider, then n (an OFFSET).

        Walks the FTS5 table alone, newest first, reading no text: FTS5 hands
        over matches in id order, so this stops after that many.
        """
        t = self.table
        return (
            f'(SELECT rowid FROM "{t}" WHERE "{t}" MATCH %s AND rowid <= %s '
            "ORDER BY rowid DESC LIMIT 1 OFFSET %s)",
            [fts5_match(query)],
        )

    def newest_matches(self, query: Query, *, filters: str = "") -> tuple[str, list[Any]]:
        """PostgreSQL: a subquery of ``(id, document)``, the newest texts matching
        ``query``; after the query's parameter, placeholders for the highest id to
        consider, the filters' own, and how many texts at most (a LIMIT).

        ``filters`` are conditions on the text's row, aliased ``b`` (joined only
        when given). GIN finds the matches as a bitmap, unordered: they are
        read and sorted by id, without their texts' rows unless filtered.
        """
        t, k = self.table, self.key
        joined = f'JOIN {self.source} b ON b.id = i."{k}" ' if filters else ""
        return (
            f'SELECT i."{k}" AS id, i.document FROM "{t}" i {joined}'
            f'WHERE i.document @@ %s::tsquery AND i."{k}" <= %s{filters} '
            f'ORDER BY i."{k}" DESC LIMIT %s',
            [tsquery(query)],
        )

    def matching_ids(self, query: Query, *, vendor: str) -> tuple[str, list[str]]:
        """``SELECT`` of the ids of every text matching ``query``, and its parameters."""
        if vendor == "postgresql":
            return (
                f'SELECT "{self.key}" FROM "{self.table}" WHERE document @@ %s::tsquery',
                [tsquery(query)],
            )
        return f'SELECT rowid FROM "{self.table}" WHERE "{self.table}" MATCH %s', [
            fts5_match(query)
        ]


def catch_up(indexes: list[SearchIndex], using: str = "default") -> None:
    """Move SQLite's queued words into FTS5, so that a search sees every stored text.

    One read for all ``indexes`` when nothing waits (nearly always, between
    bursts of writes); otherwise, for each index with queued rows, one DELETE,
    a transaction of its own, whose trigger inserts each row into FTS5. Two
    searches catching up at once are serialised by SQLite's write lock: the
    second deletes nothing. Nothing to do on PostgreSQL.
    """
    connection = connections[using]
    if connection.vendor == "postgresql":
        return
    probes = " UNION ALL ".join(
        f'SELECT {i} FROM (SELECT 1 FROM "{index.pending}" LIMIT 1)'
        for i, index in enumerate(indexes)
    )
    with connection.cursor() as cursor:
        cursor.execute(probes)
        for (i,) in cursor.fetchall():
            cursor.execute(f'DELETE FROM "{indexes[i].pending}"')


def _prepared(text: str, vendor: str) -> str:
    return tsvector_literal(words(text)) if vendor == "postgresql" else document(text)


@dataclass(frozen=True)
class Match:
    """SQLite: SQL fragments of one search of one FTS5 table, with their parameters."""

    joins: str
    where: str
    where_params: list[str]
    score: str
    # The text's id as FTS5 holds it: constraints on it narrow the FTS5 scan.
    id: str


# --- compiling a query --------------------------------------------------------------------


def fts5_match(query: Query) -> str:
    """``query`` as an FTS5 MATCH expression: every term a quoted string.

    ``"cache key"`` is a phrase, ``"deplo" *`` a prefix, ``(a AND b) NOT c``
    an exclusion. Inside a quoted string FTS5 reads no operator, column name
    or keyword, and a ``"`` is written twice.
    """
    positive = " AND ".join(_fts5_term(t) for t in query.include)
    return f"({positive})" + "".join(f" NOT {_fts5_term(t)}" for t in query.exclude)


def _fts5_term(term: Term) -> str:
    quoted = '"' + " ".join(term.words).replace('"', '""') + '"'
    return quoted + " *" if term.prefix else quoted


def tsquery(query: Query) -> str:
    """``query`` as a ``tsquery`` literal: quoted lexemes, ``<->`` for phrases, ``:*``
    for a prefix, ``!`` to exclude. Read with ``::tsquery``, no parser or dictionary."""
    parts = [_tsquery_term(t) for t in query.include]
    parts += [f"!{_tsquery_term(t)}" for t in query.exclude]
    return " & ".join(parts)


def _lexeme(word: str) -> str:
    return "'" + word.replace("\\", "\\\\").replace("'", "''") + "'"


def _tsquery_term(term: Term) -> str:
    lexemes = [_lexeme(w) for w in term.words]
    if term.prefix:
        lexemes[-1] += ":*"
    return lexemes[0] if len(lexemes) == 1 else "(" + " <-> ".join(lexemes) + ")"


def tsvector_literal(found: list[str]) -> str:
    """The words of a text as a ``tsvector`` literal, each with its positions from 1."""
    positions: dict[str, list[int]] = {}
    for position, word in enumerate(found, 1):
        kept = positions.setdefault(word, [])
        if len(kept) < _PG_POSITIONS_PER_WORD and position <= _PG_POSITION_MAX:
            kept.append(position)
    return " ".join(
        _lexeme(word) + (":" + ",".join(map(str, kept)) if kept else "")
        for word, kept in positions.items()
    )
