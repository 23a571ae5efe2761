"""Tokens pasted back to back, with nothing between them.

``ghp_...ghp_...``, ``sk_live_...sk_live_...``, ``glpat-...glpat-...``, a JWT
and then a token: each rule reads a token's body as a run of token
characters, so its pattern runs on into the next token. GitHub's
``[A-Za-z0-9]{36,}`` takes the ``ghp`` of the next ``ghp_`` and stops at its
``_``, which leaves the rest of the second token in the text; a base64url body
takes the whole next token in, reported as one; a fixed-length token
(AKIA..., AIza...) with more token characters behind it does not match at all,
and the one behind it is glued. No pattern can tell on its own where one token
ends and the next begins.

So the runs are cut before the rules read the body. Each token prefix
(``Rule.prefix``) may start a chain of pieces, each a whole token of its rule
when it stands alone: the pattern matches all of it and the rule keeps the
match (dummy and mixed-case checks included). Chains are built from the right:
a piece runs to the start of a chain further on, or to a clear end. The rules
then read the body with a blank in front of every piece glued to what
precedes it, as if the tokens had been pasted with a blank between them, so
each is redacted whole and counted on its own. The blank is only in the text
that the rules read (``Split``); the spans they find are mapped back to the
body.

A cut is preferred to one long token, so two GitLab tokens count as two,
except in front of a prefix that random token bodies hold now and then
(``Rule.prefix_in_bodies``: ``sk-`` and ``hf_`` are three characters). There
the cut is made only where the token in front cannot take the next one in as
part of itself; otherwise the two stay one token of the first kind, redacted
whole and counted once, rather than a real key being reported as two.

A chain is taken where its first piece is a token as its rule reads it in the
body: at a boundary, or glued to a word and passing the rule's glue check, as
a single glued token must. A piece glued to another whole token needs no glue
check; the token in front is the evidence. The rules must read every piece
whole, so a piece is none where a token of a rule that comes first starts
inside it, or where a token whose prefix it took in may go on past its end (a
JWT over a dot, a wrapped token over a line break); and a run that a token in
front of it runs on into, on its line or wrapped onto it, is left to the rules
as it is: a blank would cut that token short.

A piece may run past at most ``_REACH`` other prefixes, so each stretch of the
body between two prefixes is read by a bounded number of matches and the work
stays linear. A token whose body holds more prefixes than that (no random one
does) is left to the rules uncut.
"""

from __future__ import annotations

import bisect
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from common.scrubbing.refine import Span
from common.scrubbing.wrap import Unwrapper

if TYPE_CHECKING:
    from common.scrubbing.rules import Rule

_TOKEN_CHARS = frozenset(string.ascii_letters + string.digits + "_-")
# A dot or a line break with more token characters behind: where a JWT goes
# on after its header, or a token that a terminal wrapped.
_GOES_ON_RE = re.compile(r"\.[A-Za-z0-9_-]|\r?\n[A-Za-z0-9_.-]")
# How many other prefixes a piece may run past.
_REACH = 3
# Characters before a prefix that the rules' look-behinds read ("%3D", "\\n", "X_").
_LOOK_BEHIND = 4


@dataclass(frozen=True)
class Split:
    """A body with a blank at each cut; ``blanks`` are their positions in ``text``."""

    text: str
    blanks: list[int]

    def to_body(self, position: int) -> int:
        """The body position of a span's start or end in ``text``."""
        return position - bisect.bisect_left(self.blanks, position)


def split(text: str, cuts: Sequence[int]) -> Split:
    """``text`` with a blank inserted at each of ``cuts`` (sorted, distinct)."""
    parts: list[str] = []
    blanks: list[int] = []
    last = 0
    for count, cut in enumerate(cuts):
        parts.append(text[last:cut])
        parts.append(" ")
        blanks.append(cut + count)
        last = cut
    parts.append(text[last:])
    return Split("".join(parts), blanks)


@dataclass(frozen=True)
class _Link:
    """The first piece of a chain of whole tokens, and the chain that goes on behind it."""

    start: int
    rule: int
    end: int
    # Whether a cut in front of the piece beats one token running over it
    # (not so where random bodies hold its prefix: ``Rule.prefix_in_bodies``).
    strong: bool
    next: _Link | None
    chain_end: int


def _glued(text: str, position: int) -> bool:
    return position > 0 and text[position - 1] in _TOKEN_CHARS


def _token(piece: str, rule: Rule, start: int, *, whole: bool) -> re.Match[str] | None:
    """A match of ``rule`` at ``start`` that the rule redacts in full; to the end if ``whole``.

    Every match tried for the cuts goes through here, on a piece no longer than
    it needs, so the characters handed to it measure the work.
    """
    match = (rule.pattern.fullmatch if whole else rule.pattern.match)(piece, start)
    return match if match is not None and rule.span(match) == match.span() else None


class Runs:
    """Finds where to cut the runs of glued tokens of ``rules``."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.rules = tuple(rules)
        self.unwrapper = Unwrapper(self.rules)
        by_prefix: dict[str, list[int]] = {}
        for index, rule in enumerate(self.rules):
            if rule.prefix is not None:
                by_prefix.setdefault(rule.prefix, []).append(index)
        # Separate searches, each starting with a literal, beat one alternation
        # (as in the prefilter).
        self._prefixes = tuple(
            (re.compile(prefix), indexes) for prefix, indexes in by_prefix.items()
        )

    def cuts(self, text: str) -> list[int]:
        """The positions, sorted, in front of which the rules should read a blank."""
        found: dict[int, list[int]] = {}
        for pattern, indexes in self._prefixes:
            for match in pattern.finditer(text):
                found.setdefault(match.start(), []).extend(indexes)
        if not any(_glued(text, position) for position in found):
            return []
        positions = sorted(found)
        # Rule indexes are priorities: the first rule that reads a chain wins.
        at = [sorted(found[position]) for position in positions]
        return _Body(self, text, positions, at).cuts()


class _Body:
    """One body's prefixes (``positions``, with the ``rules`` of each) and their chains."""

    def __init__(self, runs: Runs, text: str, positions: list[int], at: list[list[int]]) -> None:
        self.runs = runs
        self.rules = runs.rules
        self.text = text
        self.positions = positions
        self.at = at
        # Tokens the rules would join across a line break, found when first
        # needed; ``_crossed`` reads them from the left.
        self._wrapped: list[Span] | None = None
        self._wrapped_read = 0
        self._wrapped_reach = 0

    def cuts(self) -> list[int]:
        links = self._links()
        cuts: list[int] = []
        covered = 0
        for index, position in enumerate(self.positions):
            if position < covered:
                continue
            taken = self._chain(index, links[index])
            if taken is None:
                continue
            end, chain_cuts = taken
            # A run that a token in front runs on into is left to the rules
            # whole: cut, it would be read again from each of its prefixes.
            if not (chain_cuts and self._crossed(index, covered, end)):
                cuts.extend(chain_cuts)
            covered = end
        return cuts

    def _links(self) -> list[_Link | None]:
        """For each prefix, from the right, the chain of whole tokens that starts there, if any."""
        links: list[_Link | None] = [None] * len(self.positions)
        for index in range(len(self.positions) - 1, -1, -1):
            onward = [link for link in links[index + 1 : index + _REACH + 2] if link is not None]
            for rule_index in self.at[index]:
                # A cut in front of a strong prefix; else one token that ends
                # clear, taking in what it can; else a cut in front of a weak one.
                link = self._cut(rule_index, index, onward, strong=True)
                if link is None:
                    end = self._natural_end(rule_index, index)
                    if end is not None:
                        strong = not self.rules[rule_index].prefix_in_bodies
                        link = _Link(self.positions[index], rule_index, end, strong, None, end)
                if link is None:
                    link = self._cut(rule_index, index, onward, strong=False)
                if link is not None:
                    links[index] = link
                    break
        return links

    def _cut(
        self, rule_index: int, index: int, onward: list[_Link], *, strong: bool
    ) -> _Link | None:
        """A whole token of the rule from prefix ``index`` to the nearest chain ``onward``."""
        start = self.positions[index]
        for follower in onward:
            if follower.strong == strong and self._whole(rule_index, index, follower.start):
                here = not self.rules[rule_index].prefix_in_bodies
                return _Link(start, rule_index, follower.start, here, follower, follower.chain_end)
        return None

    def _whole(self, rule_index: int, index: int, end: int, *, behind: int = 0) -> bool:
        """Whether the rule redacts the piece from prefix ``index`` to ``end`` whole, as one.

        With ``behind``, the rule also reads that many characters of the body in
        front of the piece, so a piece glued to a word is judged as the rule
        judges a glued token (by its glue check); without, the piece stands alone.
        """
        start = self.positions[index]
        begin = max(0, start - behind)
        piece = self.text[begin:end]
        if _token(piece, self.rules[rule_index], start - begin, whole=True) is None:
            return False
        return self._undivided(rule_index, index, end)

    def _natural_end(self, rule_index: int, index: int) -> int | None:
        """Where a token of the rule standing at prefix ``index`` ends clear, if it is one.

        Clear: no token character behind it, nor, where it took in another
        prefix, what that prefix's token may go on over. The body is read up to
        the prefix ``_REACH`` + 1 further on; a token that runs on to it is not clear.
        """
        start = self.positions[index]
        match = _token(
            self.text[start : self._limit(index)], self.rules[rule_index], 0, whole=False
        )
        if match is None:
            return None
        end = start + match.end()
        if self.text[end : end + 1] in _TOKEN_CHARS:
            return None
        took_in = index + 1 < len(self.positions) and self.positions[index + 1] < end
        if took_in and _GOES_ON_RE.match(self.text, end):
            return None
        return end if self._undivided(rule_index, index, end) else None

    def _undivided(self, rule_index: int, index: int, end: int) -> bool:
        """Whether no token of a rule that comes first starts inside the piece and takes part of it.

        The rules read the piece with the blanks around it, each rule over the
        whole body in turn; one that comes first would take such a token out
        of the piece and leave the rest of it.
        """
        start = self.positions[index]
        inner = index + 1
        while inner < len(self.positions) and self.positions[inner] < end:
            position = self.positions[inner]
            begin = max(start, position - _LOOK_BEHIND)
            for first in self.at[inner]:
                if first < rule_index and _token(
                    self.text[begin:end], self.rules[first], position - begin, whole=False
                ):
                    return False
            inner += 1
        return True

    def _chain(self, index: int, link: _Link | None) -> tuple[int, list[int]] | None:
        """The end and the cuts of the chain at prefix ``index``, if it may start there."""
        if link is None:
            return None
        start = link.start
        glued = _glued(self.text, start)
        if self._whole(link.rule, index, link.end, behind=_LOOK_BEHIND):
            cuts = [start] if glued else []
            piece = link.next
            while piece is not None:
                cuts.append(piece.start)
                piece = piece.next
            return link.chain_end, cuts
        if not glued:
            return None
        # The first piece fails its rule's glue check as a token glued to this
        # word (glue_random wants a digit), but the whole run may pass it.
        for rule_index in self.at[index]:
            end = self._natural_end(rule_index, index)
            if end is not None and self._whole(rule_index, index, end, behind=_LOOK_BEHIND):
                return end, [start]
        return None

    def _crossed(self, index: int, covered: int, end: int) -> bool:
        """Whether a token the rules read from a prefix in front runs on into chain ``index``.

        The rules would read that token first or take it out of the chain's
        first piece; the blanks would cut it short and leave the rest of it.
        Such a run is left to the rules as it is. No token runs on past the
        clear ``end`` of the chain, so the body is read up to there; a token
        that a terminal wrapped onto the chain's line is one the rules join.
        Chains are asked about from the left.
        """
        start = self.positions[index]
        if self._wrapped_into(start):
            return True
        earlier = index - 1
        while earlier >= max(0, index - _REACH - 1) and self.positions[earlier] >= covered:
            position = self.positions[earlier]
            begin = max(0, position - _LOOK_BEHIND)
            piece = self.text[begin:end]
            for rule_index in self.at[earlier]:
                match = _token(piece, self.rules[rule_index], position - begin, whole=False)
                if match is not None and begin + match.end() > start:
                    return True
            earlier -= 1
        return False

    def _wrapped_into(self, position: int) -> bool:
        """Whether a token the rules join across a line break runs from before ``position`` past it.

        Asked with ``position`` never going back.
        """
        if self._wrapped is None:
            unwrapper = self.runs.unwrapper
            sites = unwrapper.find_sites(self.text)
            self._wrapped = sorted(
                span
                for index, rule in enumerate(self.rules)
                if rule.wraps and sites
                for span in unwrapper.spans(index, self.text, sites)
            )
        while self._wrapped_read < len(self._wrapped) and (
            self._wrapped[self._wrapped_read][0] < position
        ):
            self._wrapped_reach = max(self._wrapped_reach, self._wrapped[self._wrapped_read][1])
            self._wrapped_read += 1
        return self._wrapped_reach > position

    def _limit(self, index: int) -> int:
        """How far a token at prefix ``index`` is read: to the prefix ``_REACH`` + 1 further on."""
        last = index + _REACH + 1
        return self.positions[last] if last < len(self.positions) else len(self.text)
