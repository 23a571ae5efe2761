"""Secrets disguised with look-alike or invisible characters.

``ghp_...`` in fullwidth letters (U+FF47 U+FF48 U+FF50 U+FF3F ...), or with
a zero-width space in it, reads as a GitHub token to a person and to every
tool that normalises text, yet no ASCII pattern matches it. So the rules also
run over a view of the body: each character replaced by its NFKC form (fullwidth and
mathematical letters, superscript digits and no-break spaces become ASCII),
and the invisible ones left out (Unicode's default-ignorable code points:
zero-width spaces and joiners, bidi controls, variation selectors, soft
hyphens). A span found in the view is mapped back to the characters of the
body it came from, so the redaction covers the original characters, the
invisible ones inside it included.

The view is for matching only: the body is stored as it was sent, and one
without a secret comes back byte for byte. Characters are folded one at a
time, not as a string, so that every character of the view comes from one
character of the body.

Most bodies are ASCII, or hold no character that folding would change: then
there is no view, at the cost of ``isascii()``, or of ``is_normalized()`` and
one search.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

from common.scrubbing.refine import Span

# Default_Ignorable_Code_Point (Unicode's DerivedCoreProperties.txt): what a
# renderer draws as nothing.
_INVISIBLE_RE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
    "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]"
)


@dataclass(frozen=True)
class View:
    """A body as the rules read it; ``origins[i]`` is where ``text[i]`` came from in the body."""

    text: str
    origins: list[int]

    def to_body(self, span: Span) -> Span:
        """The body's characters that a non-empty span of the view came from."""
        return self.origins[span[0]], self.origins[span[1] - 1] + 1


@lru_cache(maxsize=4096)
def _fold(char: str) -> str:
    if _INVISIBLE_RE.fullmatch(char):
        return ""
    return unicodedata.normalize("NFKC", char)


def view(text: str) -> View | None:
    """``text`` folded for matching, or None if folding changes nothing."""
    if text.isascii():
        return None
    if unicodedata.is_normalized("NFKC", text) and _INVISIBLE_RE.search(text) is None:
        return None
    parts: list[str] = []
    origins: list[int] = []
    for index, char in enumerate(text):
        if char.isascii():
            parts.append(char)
            origins.append(index)
            continue
        folded = _fold(char)
        parts.append(folded)
        origins.extend(itertools.repeat(index, len(folded)))
    folded_text = "".join(parts)
    if folded_text == text:
        return None
    return View(folded_text, origins)
