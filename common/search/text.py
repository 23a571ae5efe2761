"""How text becomes searchable words: one folding and one tokenizer, in Python.

The index, the query and the snippets all read text through here, on both
databases. Neither database tokenizes anything: SQLite's FTS5 table uses its
``ascii`` tokenizer over the words joined by spaces (every non-ASCII character
is a word character to it, so it splits exactly at those spaces), and
PostgreSQL receives a ready ``tsvector``. So a word is the same word on both,
and a search finds the same rows on both.

A character is folded on its own (``fold_char``): compatibility forms
decomposed (``ﬁ`` is ``fi``, ``㎒`` is ``mhz``), case folded (``ß`` is ``ss``),
accents and other non-spacing marks dropped (``é`` is ``e``). Letters, digits
and the marks that remain make words; everything else separates them
(spaces, punctuation, symbols, ``_``). Han ideographs and kana are words of
one character each, since those scripts put no spaces between words: a query
for a word of them becomes a phrase of its characters. Words longer than
``limits.SEARCH_WORD_MAX`` characters are cut to that length.

Folding character by character (not the text as a whole) is what lets a
snippet map every word back to the characters of the stored body it came
from. The rules are part of what is indexed: changing them needs the stored
documents rebuilt (``common.search.index.SearchIndex.fill``).
"""

from __future__ import annotations

import functools
import itertools
import re
import unicodedata

from common import limits

WORD_MAX = limits.SEARCH_WORD_MAX

# Runs of characters that may belong to words: every ASCII character outside
# them separates words, and a run of ASCII letters and digits alone is one word.
_RUN_SPLIT = re.compile(r"([A-Za-z0-9\u0080-\U0010ffff]+)")
_ASCII_WORD = re.compile(r"[a-z0-9]+")

# Scripts written without spaces between words: each character is a word.
_OWN_WORD_RANGES = (
    (0x3040, 0x30FF),  # hiragana, katakana
    (0x31F0, 0x31FF),  # katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0x20000, 0x323AF),  # CJK extensions B to H, compatibility supplement
)


def _own_word(ch: str) -> bool:
    code = ord(ch)
    return any(low <= code <= high for low, high in _OWN_WORD_RANGES)


def _fold_once(text: str) -> str:
    return unicodedata.normalize("NFKD", unicodedata.normalize("NFKD", text).casefold())


def fold_char_uncached(c: str) -> str:
    """``c`` folded: its word characters, with a space for each separator.

    A character that folds to nothing (a combining accent) neither adds to
    nor ends a word. An ideograph comes back between spaces: a word alone.
    """
    text = _fold_once(c)
    # Case folding and decomposition may each undo the other's work (a
    # compatibility form that decomposes into capitals): until nothing changes.
    for _ in range(3):
        again = _fold_once(text)
        if again == text:
            break
        text = again
    out = []
    for ch in text:
        category = unicodedata.category(ch)
        if category == "Mn":
            continue
        if _own_word(ch):
            out.append(f" {ch} ")
        elif category[0] in "LNM":
            out.append(ch)
        else:
            out.append(" ")
    return "".join(out)


fold_char = functools.lru_cache(maxsize=65536)(fold_char_uncached)


def words(text: str) -> list[str]:
    """The folded words of ``text``, in order: what the index holds for it."""
    if text.isascii():
        found = _ASCII_WORD.findall(text.lower())
    else:
        found = "".join(map(fold_char, text)).split()
    return [w if len(w) <= WORD_MAX else w[:WORD_MAX] for w in found]


def document(text: str) -> str:
    """``text`` as the index stores it: its folded words joined by single spaces."""
    return " ".join(words(text))


# A word of a text and where it came from: (start, end, word), ``text[start:end]``.
# Plain tuples: a 16 KB body has thousands of words, and snippets read them per result.
Span = tuple[int, int, str]


def spans(text: str) -> list[Span]:
    """``words(text)`` with the place of each in ``text``, for snippets.

    The same words in the same order as ``words``: a word's position here is
    its position in the index.
    """
    if text.isascii():
        # Split and add up lengths rather than one match object per word: a
        # third of the time for a 16 KB body.
        parts = _RUN_SPLIT.split(text.lower())
        ends = _offsets(parts)
        # Each word starts where the separator before it ends; one more separator ends the text.
        found = list(zip(ends[0::2], ends[1::2], parts[1::2], strict=False))
        if any(len(word) > WORD_MAX for word in parts[1::2]):
            found = [(a, b, w[:WORD_MAX]) for a, b, w in found]
        return found
    found: list[Span] = []
    append = found.append
    parts = _RUN_SPLIT.split(text)
    ends = _offsets(parts)
    for k in range(1, len(parts), 2):
        chunk, base = parts[k], ends[k - 1]
        if chunk.isascii():
            word = chunk.lower()
            append((base, ends[k], word if len(word) <= WORD_MAX else word[:WORD_MAX]))
            continue
        current: list[str] = []
        begin = end = -1
        for i, c in enumerate(chunk, base):
            folded = fold_char(c)
            if not folded:
                if current:
                    end = i + 1  # an accent belongs to the word it sits on
                continue
            for ch in folded:
                if ch == " ":
                    if current:
                        append(_span(begin, end, current))
                        current = []
                    continue
                if not current:
                    begin = i
                current.append(ch)
                end = i + 1
        if current:
            append(_span(begin, end, current))
    return found


def _offsets(parts: list[str]) -> list[int]:
    return list(itertools.accumulate(map(len, parts)))


def _span(start: int, end: int, letters: list[str]) -> Span:
    word = "".join(letters)
    return (start, end, word if len(word) <= WORD_MAX else word[:WORD_MAX])
