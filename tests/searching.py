"""Helpers of the search tests: what a query should find, worked out in plain Python."""

from __future__ import annotations

from common.search.query import Query, Term


def _term_at(found: list[str], term: Term, i: int) -> bool:
    last = len(term.words) - 1
    if i + last >= len(found):
        return False
    for j, word in enumerate(term.words):
        have = found[i + j]
        if not (have == word or (term.prefix and j == last and have.startswith(word))):
            return False
    return True


def term_matches(found: list[str], term: Term) -> bool:
    return any(_term_at(found, term, i) for i in range(len(found)))


def reference_matches(found: list[str], query: Query) -> bool:
    """Whether a text of words ``found`` matches ``query``, as SPEC §9 and
    common/search/query.py define it: every term included, none excluded."""
    return all(term_matches(found, t) for t in query.include) and not any(
        term_matches(found, t) for t in query.exclude
    )
