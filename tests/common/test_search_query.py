"""plumb's search language (common/search/query.py) and its compiled forms
(common/search/index.py): what each query means, exactly which are malformed, and
that no query, however odd, reaches FTS5 as anything but quoted words."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from common import limits
from common.search.index import fts5_match, tsquery
from common.search.query import InvalidQuery, Query, Term, parse
from common.search.text import document, words
from tests.searching import reference_matches


@pytest.mark.parametrize(
    ("q", "terms"),
    [
        ("cache key", [Term(("cache",)), Term(("key",))]),
        ('"Cache Key"', [Term(("cache", "key"))]),
        ("-flaky deploy*", [Term(("flaky",), exclude=True), Term(("deploy",), prefix=True)]),
        ('-"cache key" tenant', [Term(("cache", "key"), exclude=True), Term(("tenant",))]),
        ('"cache tena"*', [Term(("cache", "tena"), prefix=True)]),
        ("Café NAÏVE", [Term(("cafe",)), Term(("naive",))]),
        ("rooms/services", [Term(("rooms", "services"))]),
        ("NEAR(a", [Term(("near", "a"))]),
        ("col:value", [Term(("col", "value"))]),
        ("a AND b OR c", [Term((w,)) for w in ("a", "and", "b", "or", "c")]),
        ("**bold**", [Term(("bold",), prefix=True)]),
        ("--twice x", [Term(("twice",), exclude=True), Term(("x",))]),
        ("x ( ) && || ^", [Term(("x",))]),
        ("dup dup DUP", [Term(("dup",))]),
        ('"a"b', [Term(("a",)), Term(("b",))]),
        ("日本", [Term(("日", "本"))]),
    ],
)
def test_queries_mean_what_the_language_says(q, terms):
    assert list(parse(q).terms) == terms


@pytest.mark.parametrize(
    ("q", "reason"),
    [
        ("", "empty"),
        ("   \t\n", "empty"),
        ("x" * (limits.SEARCH_QUERY_MAX + 1), "too_long"),
        ("-" * 10_000, "too_long"),
        ('"unbalanced', "unbalanced_quote"),
        ('a "b" "c', "unbalanced_quote"),
        ("-", "dangling_operator"),
        ("foo -", "dangling_operator"),
        ("- foo", "dangling_operator"),
        ("-...", "dangling_operator"),
        ('-""', "dangling_operator"),
        ("*", "dangling_operator"),
        ("**", "dangling_operator"),
        ("foo *", "dangling_operator"),
        ("foo.*", "dangling_operator"),
        ('""*', "dangling_operator"),
        ("-*", "dangling_operator"),
        ("ab*", "prefix_too_short"),
        ("日*", "prefix_too_short"),
        (" ".join(f"w{i}" for i in range(limits.SEARCH_TERMS_MAX + 1)), "too_many_terms"),
        (
            '"' + " ".join(f"w{i}" for i in range(limits.SEARCH_WORDS_MAX + 1)) + '"',
            "too_many_terms",
        ),
        ("-foo", "no_positive_term"),
        ('-foo -"bar baz"', "no_positive_term"),
        ("(", "no_positive_term"),
        ("&& || ^ :", "no_positive_term"),
        ('""', "no_positive_term"),
    ],
)
def test_malformed_queries_are_refused_with_their_reason(q, reason):
    with pytest.raises(InvalidQuery) as refused:
        parse(q)
    assert refused.value.code == "invalid_query"
    assert refused.value.status == 400
    assert refused.value.details == {"reason": reason}


def test_the_limits_themselves_are_accepted():
    assert parse("x" * limits.SEARCH_QUERY_MAX)
    assert parse(" ".join(f"w{i}" for i in range(limits.SEARCH_TERMS_MAX)))
    assert parse("abc*").terms == (Term(("abc",), prefix=True),)


# --- any text at all -----------------------------------------------------------------------

# Pieces of FTS5, tsquery and plumb syntax, so that the fuzzing reaches them often.
SYNTAX = st.sampled_from(
    ['"', "-", "*", "(", ")", ":", "^", "+", "NEAR(", "NOT", "AND", "OR", "col:", "{a b}:",
     "!", "&", "|", "<->", ":*", "'", "\\", "\x00", " ", "é", "日", "deploy"]
)  # fmt: skip
QUERIES = st.lists(st.one_of(SYNTAX, st.text(max_size=8)), max_size=12).map("".join)


@settings(max_examples=500, deadline=None, derandomize=True)
@given(QUERIES)
@example("NEAR(a b, 3)")
@example('document : "x" OR y')
@example("{document}: x ^y")
@example("x" + "-" * 600)
def test_any_text_is_a_query_or_invalid_query_and_nothing_else(q):
    reasons = {
        "empty", "too_long", "unbalanced_quote", "dangling_operator", "prefix_too_short",
        "too_many_terms", "no_positive_term",
    }  # fmt: skip
    query, refused = None, None
    try:
        query = parse(q)
    except InvalidQuery as exc:
        refused = exc
    if refused is not None:
        assert refused.details["reason"] in reasons
        return
    assert query.include
    assert len(query.terms) <= limits.SEARCH_TERMS_MAX
    for term in query.terms:
        assert term.words
        assert all(w and w == words(w)[0] for w in term.words)
    assert fts5_match(query)
    assert tsquery(query)


@pytest.fixture(scope="module")
def fts5():
    """An in-memory FTS5 table as plumb's index defines it, with a small corpus."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE ix USING fts5(document, tokenize = 'ascii')")
    corpus = [
        "the cache key must include the tenant",
        "Cache-key rotation: deploy on Friday",
        "café au lait, naïve façade",
        "NEAR the column: col value AND more",
        "deployment deployed deploys",
        "日本語のテキスト",
        "nothing to see here",
    ]
    db.executemany(
        "INSERT INTO ix (rowid, document) VALUES (?, ?)",
        [(i, document(text)) for i, text in enumerate(corpus)],
    )
    yield db, corpus
    db.close()


@settings(max_examples=400, deadline=None, derandomize=True)
@given(QUERIES)
@example("NEAR(cache key)")
@example("col: value")
@example('"cache key" -tenant')
@example("deplo* -friday")
@example("日本")
def test_fts5_takes_every_compiled_query_and_finds_what_the_language_means(fts5, q):
    db, corpus = fts5
    try:
        query = parse(q)
    except InvalidQuery:
        return
    found = {
        row for (row,) in db.execute("SELECT rowid FROM ix WHERE ix MATCH ?", [fts5_match(query)])
    }
    assert found == {i for i, text in enumerate(corpus) if reference_matches(words(text), query)}


def test_a_query_is_a_value_object():
    assert parse("a b") == Query((Term(("a",)), Term(("b",))))
