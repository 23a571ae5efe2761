"""Snippets: the matched words of a stored text, in context, of a bounded length.

Built from the stored body (never from the folded document the index holds),
with the same words at the same positions as the index (``text.spans``): a
word matches a term of the query exactly as the index matched it, so what a
snippet marks is what made the text a result. Only the terms the query looks
for are marked, never its exclusions.

``segments`` returns the pieces; REST and MCP write a match as ``**word**``
(``markdown``) and the admin as ``<mark>`` (its own rendering). In the
``**`` form the text around matches has its backslashes and asterisks
escaped, so ``**`` in a snippet only ever marks a match; runs of white space
become one space, so a snippet is one line.
"""

from __future__ import annotations

import bisect
import operator
import re

from common.search.query import Query, Term
from common.search.text import Span, spans

# Characters of the stored text a snippet shows, matches included, at most
# (a word longer than that is shown whole).
SNIPPET_CHARS = 200
ELLIPSIS = "…"
# Past this many characters a body is read around its first match only (segments).
LONG_BODY = 2000

_START = operator.itemgetter(0)
_END = operator.itemgetter(1)
_SPACES = re.compile(r"\s+")
_MARKDOWN_SPECIAL = re.compile(r"([\\*])")


def _occurrences(found: list[Span], term: Term, at: dict[str, list[int]]) -> list[int]:
    """The word indexes where ``term`` starts matching ``found``; ``at``: word -> indexes."""
    first, *rest = term.words
    if term.prefix and not rest:
        return [i for word, where in at.items() if word.startswith(first) for i in where]
    hits = []
    last = len(rest)
    for i in at.get(first, ()):
        if i + last >= len(found):
            break
        for j, word in enumerate(rest, 1):
            have = found[i + j][2]
            if not (have == word or (term.prefix and j == last and have.startswith(word))):
                break
        else:
            hits.append(i)
    return hits


def segments(body: str, query: Query) -> list[tuple[str, bool]]:
    """The snippet of ``body`` for ``query``: ``(text, is_match)`` pieces, in order.

    The window is the stretch of at most ``SNIPPET_CHARS`` characters that
    holds matches of the most distinct terms (then the most matches), with
    some words of context before its first match when they fit. With no
    match to show, it is the start of the body.

    A body longer than ``LONG_BODY`` characters is read only around its first
    match, found by a plain text search: splitting 16 KB into words for each
    of 20 results would cost a page some 60 ms.
    """
    if len(body) > LONG_BODY:
        first = _first_match_hint(body, query)
        if first is not None:
            near = _segments(body, query, *_region(body, first))
            if any(is_match for _, is_match in near):
                return near
    return _segments(body, query, 0, len(body))


def _first_match_hint(body: str, query: Query) -> int | None:
    """Where the first word of a term of ``query`` seems to occur in ``body``, if it does.

    A guess by plain case-insensitive search (accents and compatibility forms
    are not folded here): ``segments`` checks it, and reads the whole body when
    the guess finds nothing.
    """
    lowered = body.lower()
    if len(lowered) != len(body):  # a few letters lengthen when lowered: no 1:1 places
        return None
    places = []
    for term in query.include:
        whole = "" if term.prefix and len(term.words) == 1 else "(?![a-z0-9])"
        found = re.search(rf"(?<![a-z0-9]){re.escape(term.words[0])}{whole}", lowered)
        if found is not None:
            places.append(found.start())
    return min(places) if places else None


def _region(body: str, first: int) -> tuple[int, int]:
    """Characters around ``first`` that hold any window starting near it, cut at spaces
    (which always separate words, so no word is cut in two)."""
    start = max(0, first - SNIPPET_CHARS)
    end = min(len(body), first + LONG_BODY)
    before = body.rfind(" ", 0, start) if start else -1
    after = body.find(" ", end)
    return before + 1, (after if after != -1 else len(body))


def _segments(body: str, query: Query, begin: int, finish: int) -> list[tuple[str, bool]]:
    """``segments`` of the words of ``body[begin:finish]``, places in ``body``."""
    found = spans(body[begin:finish])
    if begin:
        found = [(a + begin, b + begin, word) for a, b, word in found]
    at: dict[str, list[int]] = {}
    for i, (_, _, word) in enumerate(found):
        at.setdefault(word, []).append(i)
    marks: list[tuple[int, int, int]] = []  # (start char, end char, term index)
    for t, term in enumerate(query.include):
        size = len(term.words) - 1
        marks += [(found[i][0], found[i + size][1], t) for i in _occurrences(found, term, at)]
    if not marks:
        return _pieces(body, 0, _cut(found, 0, len(body)), [])
    marks.sort()
    first, last = _best_window(marks)
    chosen = marks[first : last + 1]
    start, covered = chosen[0][0], max(m[1] for m in chosen)
    # Whole words of context before the first match, as far as the window has room.
    context = min(SNIPPET_CHARS // 4, (SNIPPET_CHARS - (covered - start)) // 2)
    earliest = bisect.bisect_left(found, start - context, key=_START)
    if earliest < len(found) and found[earliest][0] < start:
        start = found[earliest][0]
    end = max(covered, _cut(found, start, len(body)))
    return _pieces(body, start, end, [(a, b) for a, b, _ in chosen])


def _best_window(marks: list[tuple[int, int, int]]) -> tuple[int, int]:
    """First and last index of the marks that fit in SNIPPET_CHARS characters and hold
    the most distinct terms, then the most marks (a sliding window over the sorted marks)."""
    counts: dict[int, int] = {}
    best, best_range = (0, 0), (0, 0)
    right = -1
    for left, (start, _, _) in enumerate(marks):
        while right + 1 < len(marks) and marks[right + 1][1] - start <= SNIPPET_CHARS:
            right += 1
            counts[marks[right][2]] = counts.get(marks[right][2], 0) + 1
        if right < left:  # this match alone is longer than a window
            score, window = (1, 1), (left, left)
        else:
            score, window = (len(counts), right - left + 1), (left, right)
            term = marks[left][2]
            counts[term] -= 1
            if not counts[term]:
                del counts[term]
        if score > best:
            best, best_range = score, window
    return best_range


def _cut(found: list[Span], start: int, length: int) -> int:
    """Where a window from ``start`` ends: after the last word that fits in SNIPPET_CHARS
    characters (at ``start + SNIPPET_CHARS`` if no word ends in it), never past the text."""
    limit = start + SNIPPET_CHARS
    if limit >= length:
        return length
    # Words end in the order they start: the ends are sorted too.
    i = bisect.bisect_right(found, limit, key=_END) - 1
    return found[i][1] if i >= 0 and found[i][1] > start else limit


def _pieces(
    body: str, start: int, end: int, marks: list[tuple[int, int]]
) -> list[tuple[str, bool]]:
    pieces: list[tuple[str, bool]] = []
    if start > 0:
        pieces.append((ELLIPSIS, False))
    at = start
    for a, b in marks:
        if a < at:  # overlaps one already marked (two terms on one word)
            if b > at:
                pieces.append((body[at:b], True))
                at = b
            continue
        if a > at:
            pieces.append((body[at:a], False))
        pieces.append((body[a:b], True))
        at = b
    if end > at:
        pieces.append((body[at:end], False))
    if end < len(body):
        pieces.append((ELLIPSIS, False))
    return _merge(pieces)


def _merge(pieces: list[tuple[str, bool]]) -> list[tuple[str, bool]]:
    merged: list[tuple[str, bool]] = []
    for text, is_match in pieces:
        if merged and merged[-1][1] == is_match:
            merged[-1] = (merged[-1][0] + text, is_match)
        elif text:
            merged.append((text, is_match))
    return merged


def markdown(pieces: list[tuple[str, bool]]) -> str:
    """The pieces as one line, each match as ``**match**``, other asterisks escaped."""
    out = []
    for text, is_match in pieces:
        text = _MARKDOWN_SPECIAL.sub(r"\\\1", _SPACES.sub(" ", text))
        out.append(f"**{text}**" if is_match else text)
    return "".join(out)


def snippet(body: str, query: Query) -> str:
    return markdown(segments(body, query))
