"""plumb's search language (SPEC §9), parsed into a small tree.

    cache key            both words, anywhere in the text, in any order
    "cache key"          the words next to each other, in this order
    -flaky  -"cache key" leave out what has the word or the phrase
    deploy*              a word starting with "deploy" (3 characters at least)
    "cache ke"*          a phrase whose last word is a prefix

Words are folded and split as the index splits text (``common.search.text``),
so case and accents never matter, and a word holding punctuation is the
phrase of its parts (``rooms/services`` is ``"rooms services"``). Nothing of
the query reaches a database as syntax: ``common.search.index`` writes every
word as a quoted literal, so ``NEAR(``, ``col:``, ``AND`` or ``^`` are words
or punctuation here, never operators there.

A query is refused with ``400 invalid_query`` and a ``reason`` when:

* ``empty``: it has nothing but spaces;
* ``too_long``: it is longer than ``SEARCH_QUERY_MAX`` characters;
* ``unbalanced_quote``: a ``"`` is left open;
* ``dangling_operator``: a ``-`` is followed by a space, the end, or
  something without a word in it (``-``, ``- foo``, ``-...``), or a ``*``
  does not directly follow a word character (``*``, ``foo *``, ``foo.*``);
* ``prefix_too_short``: the word before a ``*`` has fewer than
  ``SEARCH_PREFIX_MIN`` characters (``ab*``);
* ``too_many_terms``: it has more than ``SEARCH_TERMS_MAX`` words and
  phrases, or more than ``SEARCH_WORDS_MAX`` words in them;
* ``no_positive_term``: nothing is left to look for (only exclusions, or
  only punctuation such as ``(`` or ``&&``, which has no words and is
  otherwise ignored).
"""

from __future__ import annotations

from dataclasses import dataclass

from common import limits
from common.errors import PlumbError
from common.search.text import spans


class InvalidQuery(PlumbError):
    code = "invalid_query"
    status = 400
    message = "The search query is malformed."
    data_fields = ("reason",)


@dataclass(frozen=True, slots=True)
class Term:
    """Words that must appear next to each other in this order (one word: anywhere).

    ``prefix``: the last word may be the start of a longer one.
    ``exclude``: what has this term is left out.
    """

    words: tuple[str, ...]
    prefix: bool = False
    exclude: bool = False


@dataclass(frozen=True, slots=True)
class Query:
    terms: tuple[Term, ...]

    @property
    def include(self) -> tuple[Term, ...]:
        return tuple(t for t in self.terms if not t.exclude)

    @property
    def exclude(self) -> tuple[Term, ...]:
        return tuple(t for t in self.terms if t.exclude)


def parse(q: str) -> Query:
    """The query ``q`` means, or ``invalid_query`` saying why it means nothing."""
    if len(q) > limits.SEARCH_QUERY_MAX:
        raise InvalidQuery(
            f"A query has at most {limits.SEARCH_QUERY_MAX} characters.", reason="too_long"
        )
    if not q.strip():
        raise InvalidQuery("The query is empty: give a word to look for.", reason="empty")
    if q.count('"') % 2:
        raise InvalidQuery(
            'A quote is left open: close each "phrase" with a second quote.',
            reason="unbalanced_quote",
        )
    terms: list[Term] = []
    i, n = 0, len(q)
    while i < n:
        if q[i].isspace():
            i += 1
            continue
        exclude = q[i] == "-"
        if exclude:
            i += 1
            if i == n or q[i].isspace():
                raise _dangling("A '-' must be followed, with no space, by what it leaves out.")
        if q[i] == '"':
            end = q.index('"', i + 1)
            text, i = q[i + 1 : end], end + 1
            star_start = i
            while i < n and q[i] == "*":
                i += 1
            star = i > star_start
        else:
            end = i
            while end < n and not q[end].isspace() and q[end] != '"':
                end += 1
            raw, i = q[i:end], end
            text = raw.rstrip("*")
            star = len(text) < len(raw)
        term = _term(text, star=star, exclude=exclude)
        if term is not None and term not in terms:
            terms.append(term)
    if len(terms) > limits.SEARCH_TERMS_MAX or (
        sum(len(t.words) for t in terms) > limits.SEARCH_WORDS_MAX
    ):
        raise InvalidQuery(
            f"A query has at most {limits.SEARCH_TERMS_MAX} words and phrases, with at most "
            f"{limits.SEARCH_WORDS_MAX} words in all.",
            reason="too_many_terms",
        )
    query = Query(tuple(terms))
    if not query.include:
        raise InvalidQuery(
            "The query has nothing to look for: give at least one word that is not "
            "excluded with '-'.",
            reason="no_positive_term",
        )
    return query


def _term(text: str, *, star: bool, exclude: bool) -> Term | None:
    found = spans(text)
    if star and (not found or found[-1][1] != len(text)):
        raise _dangling("A '*' must directly follow the word it completes, as in deploy*.")
    if not found:
        if exclude:
            raise _dangling("A '-' must be followed by a word or a phrase to leave out.")
        return None  # punctuation alone: nothing to look for, and nothing wrong
    if star and len(found[-1][2]) < limits.SEARCH_PREFIX_MIN:
        raise InvalidQuery(
            f"A prefix needs at least {limits.SEARCH_PREFIX_MIN} characters before its '*'.",
            reason="prefix_too_short",
        )
    return Term(words=tuple(word for _, _, word in found), prefix=star, exclude=exclude)


def _dangling(message: str) -> InvalidQuery:
    return InvalidQuery(message, reason="dangling_operator")
