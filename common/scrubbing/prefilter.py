"""Skip the rule table for a body in which no rule's pattern can match.

Most bodies are prose with no secret in them, and running every pattern over
them costs far more than looking for the few literals that every secret needs.
Each rule declares anchors: regexes, each a weakening of a stretch of the
pattern that every match goes through (a prefix such as ``ghp_``, a key word
followed by its operator such as ``password:``). If no anchor of any rule
matches, no pattern matches either, the first pass of ``scrub_full`` would find
nothing, and its result is the body unchanged with nothing reported.

Case-insensitive parts of the patterns (``(?i:password)``) are checked on a
folded copy of the body, so that ``PassWord`` costs one lower-casing rather
than a case-insensitive search per anchor. Folding has to reproduce every
match of ``re.IGNORECASE``, which also pairs four non-ASCII letters with ASCII
ones; see ``fold``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from common.scrubbing.rules import Rule

# re's IGNORECASE pairs four non-ASCII letters with ASCII ones. str.lower()
# turns U+212A (Kelvin sign) into "k", but keeps U+0131 (dotless small i) and
# U+017F (long s) and turns U+0130 (dotted capital I) into "i" and a combining
# dot, so those three are replaced first. The tests check this against every
# code point.
_CASE_TWINS = (("\u0130", "i"), ("\u0131", "i"), ("\u017f", "s"))


def fold(text: str) -> str:
    """Lower-case ``text`` so that every ``(?i:...)`` match of ASCII becomes a plain match.

    Wherever a case-insensitive ASCII pattern matches ``text``, its lower-case
    form matches ``fold(text)`` case-sensitively, at the same place: each
    character the pattern matched is replaced by the lower-case ASCII
    character it stood for.
    """
    if not text.isascii():
        for twin, letter in _CASE_TWINS:
            text = text.replace(twin, letter)
    return text.lower()


class Prefilter:
    """Whether any of a set of rules can match a text, decided from their anchors."""

    def __init__(self, rules: Iterable[Rule]) -> None:
        rules = tuple(rules)
        # One rule without anchors could match anywhere, so nothing is skipped.
        self.enabled = all(rule.anchors or rule.folded_anchors for rule in rules)
        # Separate searches, each starting with a literal, beat one alternation:
        # re skips ahead to a literal prefix but tries every branch of an
        # alternation at every position.
        self._anchors = tuple(
            re.compile(anchor) for anchor in dict.fromkeys(a for r in rules for a in r.anchors)
        )
        self._folded_anchors = tuple(
            re.compile(anchor)
            for anchor in dict.fromkeys(a for r in rules for a in r.folded_anchors)
        )

    def may_match(self, text: str) -> bool:
        """False only if no rule's pattern matches anywhere in ``text``."""
        if not self.enabled:
            return True
        if any(anchor.search(text) for anchor in self._anchors):
            return True
        folded = fold(text)
        return any(anchor.search(folded) for anchor in self._folded_anchors)
