"""Snippets (common/search/snippets.py): the matched words of the stored text, in
context, bounded, each match as **match**, and nothing else looking like one."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from common.search.query import parse
from common.search.snippets import ELLIPSIS, SNIPPET_CHARS, segments, snippet

BODY = (
    "We talked about the cache in loader.py for a while. After the release, Bob said "
    "the cache key must include the tenant id, otherwise two tenants share entries. "
    "Décision: the café tenant gets its own key."
)


def marked(text: str) -> list[str]:
    return re.findall(r"(?<!\\)\*\*(.+?)(?<!\\)\*\*", text)


def test_each_match_is_wrapped_in_double_asterisks_as_stored():
    assert marked(snippet(BODY, parse("decision cafe"))) == ["Décision", "café"]


def test_a_phrase_is_marked_whole_and_only_where_its_words_are_together():
    text = snippet(BODY, parse('"cache key"'))
    assert marked(text) == ["cache key"]


def test_a_prefix_marks_every_word_it_starts():
    assert marked(snippet(BODY, parse("tenant*"))) == ["tenant", "tenants", "tenant"]


def test_exclusions_are_never_marked():
    assert marked(snippet(BODY, parse("key -flaky"))) == ["key", "key"]


def test_the_window_holds_the_most_distinct_terms():
    body = "key " + "filler " * 60 + "the cache key is here " + "filler " * 60 + "key"
    text = snippet(body, parse("cache key"))
    assert "**cache** **key** is here" in text
    assert text.startswith(ELLIPSIS)
    assert text.endswith(ELLIPSIS)


def test_a_snippet_is_bounded_and_one_line():
    body = ("line with match\n\n" + "x" * 30 + "\t") * 200
    text = snippet(body, parse("match"))
    assert "\n" not in text
    assert "\t" not in text
    shown = "".join(piece for piece, _ in segments(body, parse("match")))
    assert len(shown) <= SNIPPET_CHARS + 2 * len(ELLIPSIS)


def test_a_word_longer_than_the_window_is_shown_whole():
    # Indexed as its first SEARCH_WORD_MAX characters, found by them, shown whole.
    body = "start " + "a" * 300 + " end"
    assert marked(snippet(body, parse("a" * 100))) == ["a" * 300]


def test_asterisks_and_backslashes_of_the_body_are_escaped():
    text = snippet(r"use **bold** or a\*b for the key", parse("key"))
    assert text == r"use \*\*bold\*\* or a\\\*b for the **key**"
    assert marked(text) == ["key"]


def test_without_a_placeable_match_the_snippet_is_the_start_of_the_body():
    assert snippet("short body", parse("absent")) == "short body"
    long = "word " * 100
    assert snippet(long, parse("absent")).endswith(ELLIPSIS)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(["cache", "key", "Café", "x" * 30, "**", "\\", "\n", "é"]), max_size=80
    )
)
def test_every_match_in_a_snippet_is_a_term_of_the_query(parts):
    body = " ".join(parts)
    query = parse("cache cafe")
    for piece, is_match in segments(body, query):
        if is_match:
            assert piece.lower().replace("é", "e") in {"cache", "cafe"}


def test_a_long_body_is_read_around_its_first_match():
    body = "filler " * 1000 + "the cache key is here " + "filler " * 1000
    text = snippet(body, parse('"cache key"'))
    assert marked(text) == ["cache key"]
    assert text.startswith(ELLIPSIS)
    assert text.endswith(ELLIPSIS)


def test_a_long_body_whose_match_plain_search_misses_is_read_whole():
    # "Décision" lowered is not "decision": the plain search guesses nothing.
    body = "x " * 3000 + "Décision: the café tenant" + " y" * 100
    assert marked(snippet(body, parse("decision cafe"))) == ["Décision", "café"]


def test_a_long_body_where_the_guess_is_no_match_is_read_whole():
    # The guess finds "cache" early, but the phrase is only at the end.
    body = "cache " + "filler " * 1000 + "cache key at last"
    assert marked(snippet(body, parse('"cache key"'))) == ["cache key"]
