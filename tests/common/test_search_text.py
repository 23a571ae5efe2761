"""How text becomes searchable words (common/search/text.py): one folding, one tokenizer,
the same words for the index, the query and the snippets."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common import limits
from common.search.text import document, fold_char, fold_char_uncached, spans, words


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Cache KEY", ["cache", "key"]),
        ("café Naïve façade", ["cafe", "naive", "facade"]),
        ("e\u0301cole", ["ecole"]),  # a combining accent, not a precomposed letter
        ("Straße ﬁle ㎒", ["strasse", "file", "mhz"]),
        ("\uff26\uff35\uff2c\uff2c width", ["full", "width"]),  # fullwidth FULL
        ("İstanbul ΣΊΣΥΦΟΣ", ["istanbul", "σισυφοσ"]),
        ("rooms/services_sending.py:42", ["rooms", "services", "sending", "py", "42"]),
        ("NEAR(a, b) col:x AND-or", ["near", "a", "b", "col", "x", "and", "or"]),
        ("emoji 🚀 rocket", ["emoji", "rocket"]),
        ("日本語のテキスト ok", ["日", "本", "語", "の", "テ", "キ", "ス", "ト", "ok"]),
        ("", []),
        ("  ...  ", []),
    ],
)
def test_words_are_folded_and_split_as_documented(text, expected):
    assert words(text) == expected


def test_hangul_words_stay_whole():
    # Korean puts spaces between words: each is one word (its syllables decomposed).
    assert len(words("한국어 텍스트")) == 2
    assert words("한국어") == words("한국어 ")


def test_a_long_word_is_cut_to_the_limit():
    long = "a" * (limits.SEARCH_WORD_MAX + 50)
    assert words(f"x {long} y") == ["x", "a" * limits.SEARCH_WORD_MAX, "y"]
    assert [w for _, _, w in spans(f"x {long} y")] == words(f"x {long} y")


def test_the_document_is_the_words_joined_by_single_spaces():
    assert document("  Hello,\n\tWORLD!  ") == "hello world"


def test_spans_say_where_each_word_came_from():
    text = "Le café, l'école et ½ tasse"
    found = spans(text)
    assert [w for _, _, w in found] == words(text)
    assert [text[a:b] for a, b, _ in found] == ["Le", "café", "l", "école", "et", "½", "½", "tasse"]


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_spans_and_words_agree_on_any_text(text):
    assert [w for _, _, w in spans(text)] == words(text)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_folding_twice_changes_nothing(text):
    folded = words(text)
    assert words(" ".join(folded)) == folded


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=127)))
def test_the_ascii_shortcut_splits_as_the_general_rule(text):
    assert words(text) == "".join(map(fold_char, text)).split()


def test_every_character_folds_to_words_that_fold_to_themselves():
    """Exhaustive over Unicode: a folded word read again is the same word, so what the
    index holds and what a query looks for never drift apart."""
    broken = []
    for code in range(sys.maxunicode + 1):
        if 0xD800 <= code <= 0xDFFF:
            continue
        for word in fold_char_uncached(chr(code)).split():
            if "".join(fold_char_uncached(c) for c in word).split() != [word]:
                broken.append(hex(code))
    assert broken == []
