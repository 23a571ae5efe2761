"""Text rules every app shows and compares names by: what is invisible, and how handles fold.

A display name or a typed ``@handle`` can hide zero-width and bidi-control
characters; the same two rules decide how rooms resolve mentions, how the
API shows names (``display_name_visible``) and how transcripts mark them.
"""

from __future__ import annotations

import functools
import unicodedata

import regex

# Unicode's Default_Ignorable_Code_Point (zero-width space and joiners, word joiner, BOM,
# soft hyphen, variation selectors, Hangul fillers, tags...) plus Bidi_Control. The `regex`
# module carries these properties; the standard library's unicodedata does not.
INVISIBLE = regex.compile(r"[\p{Default_Ignorable_Code_Point}\p{Bidi_Control}]")
# visible() also writes out controls, line/paragraph separators and lone surrogates, which a
# display name can carry and which would otherwise break or hide part of a line.
_HIDDEN = regex.compile(
    r"[\p{Default_Ignorable_Code_Point}\p{Bidi_Control}\p{Cc}\p{Zl}\p{Zp}\p{Cs}]"
)


def normalize_handle(text: str) -> str:
    """Return the form in which typed handles and member handles are compared.

    Invisible characters are removed first, so that the marks they separate compose under
    NFKC; then NFKC, case folding, and NFKC again, since folding can leave text that is not
    normalized.
    """
    text = INVISIBLE.sub("", text)
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())


@functools.lru_cache(maxsize=4096)
def visible(text: str) -> str:
    """Write invisible, bidi-control and control characters as ``<U+200B>``.

    Used for ``display_name_visible``, so that a reader can see what a display name hides.
    Cached: a page of 50 events shows the same few names a hundred times.
    """
    return _HIDDEN.sub(lambda match: f"<U+{ord(match.group()):04X}>", text)
