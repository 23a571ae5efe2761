"""Tokens broken across two lines, as a terminal wraps a long line at a fixed column.

``echo $GITHUB_TOKEN`` in a narrow terminal, copied and pasted, arrives as
``ghp_kfhfgtKAQWYm85EZgslm`` and ``Bp65HpUbz04IfkvX`` on two lines. Neither
half is a token, so the rule table alone would store both.

For a rule that ``wraps`` (the prefixed token formats), each line break
between two token characters is a site: the run of token characters that ends
the line is joined with the run that starts the next one, and the rule is
matched against the joined text. A match that crosses the join is the token,
and its span in the body takes the line break with it.

Joining must not swallow the next line after a complete token
(``ghp_...\\nexport NEXT=1``), so a match is only taken if the part before the
break is not a token on its own, or is shorter than the format's full length
(``Rule.full_length``: a fine-grained GitHub token is 93 characters, though
the rule accepts a shorter one). A token of a variable-length format wrapped
after its shortest form is therefore not joined: its first line is redacted
on its own and its second line stays, as telling that tail from the first
word of an ordinary next line would take the terminal's width, which the
body does not carry.

The prefix must end up before the break (its anchor is looked for there),
which is also what keeps the prefilter right: a body with such a token holds
the rule's anchor.

Sites are found by searching for the line break itself (a literal); each
site reads at most ``_REACH`` characters on either side, and only the rules
whose prefix is in the run before the break are tried there, so the work
stays linear in the body.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from common.scrubbing.refine import Span

if TYPE_CHECKING:
    from common.scrubbing.rules import Rule

# A line break after three token characters (the shortest prefix: sk-, hf_,
# eyJ) and before one. The search starts at the "\n", a literal; the
# look-behinds check the characters before it.
_BREAK_RE = re.compile(
    r"\n(?:(?<=[A-Za-z0-9_.-]{3}\n)|(?<=[A-Za-z0-9_.-]{3}\r\n))(?=[A-Za-z0-9_.-])"
)
_RUN_RE = re.compile(r"[A-Za-z0-9_.-]*+")
# How far a site reads back along its line and forward along the next: longer
# than any token the rules recognise on one line of a terminal.
_REACH = 2048
# Characters before a run that the rules' look-behinds read ("%3D", "\\n", "X_").
_LOOK_BEHIND = 4
# No wrapping rule matches fewer characters (xoxb- and ten more, a Slack token).
_SHORTEST_TOKEN = 15


@dataclass(frozen=True)
class Site:
    """A line break inside a run of token characters, and the text around it."""

    context_start: int  # where ``joined`` starts in the body
    break_start: int  # the "\r\n" or "\n"
    break_end: int
    # body[context_start:break_start], the next line's run and one character after it
    joined: str
    # Indexes of the wrapping rules whose prefix is in the run before the break.
    rules: frozenset[int]

    @property
    def cut(self) -> int:
        """Where the break was, as an offset into ``joined``."""
        return self.break_start - self.context_start

    def to_body(self, offset: int, *, end: bool) -> int:
        """The body position of an offset into ``joined`` (a span's end stays before the break)."""
        if offset < self.cut or (end and offset == self.cut):
            return self.context_start + offset
        return offset - self.cut + self.break_end


class Unwrapper:
    """Finds the tokens of ``rules`` that a line break cuts in two."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.rules = tuple(rules)
        # One alternation of every wrapping rule's anchors, a named group per
        # rule, tells at each site which rules to try there.
        self._prefixes = re.compile(
            "|".join(
                f"(?P<r{index}>{'|'.join(rule.anchors)})"
                for index, rule in enumerate(self.rules)
                if rule.wraps
            )
        )

    def find_sites(self, text: str) -> list[Site]:
        """Every line break that may run through a token."""
        sites = []
        for match in _BREAK_RE.finditer(text):
            break_end = match.end()
            break_start = match.start() - (text[match.start() - 1] == "\r")
            line_start = text.rfind("\n", 0, break_start) + 1
            reach_start = max(line_start, break_start - _REACH)
            # The run of token characters that ends the line, read backwards.
            run_length = _RUN_RE.match(text[reach_start:break_start][::-1]).end()
            run_start = break_start - run_length
            run_end = _RUN_RE.match(text, break_end, break_end + _REACH).end()
            if run_length + run_end - break_end < _SHORTEST_TOKEN:
                continue
            rules = frozenset(
                int(prefix.lastgroup[1:])
                for prefix in self._prefixes.finditer(text, run_start, break_start)
            )
            if not rules:
                continue
            context_start = max(reach_start, run_start - _LOOK_BEHIND)
            joined = text[context_start:break_start] + text[break_end : run_end + 1]
            sites.append(Site(context_start, break_start, break_end, joined, rules))
        return sites

    def spans(self, index: int, text: str, sites: Sequence[Site]) -> Iterator[Span]:
        """Spans in ``text`` of the tokens of rule ``index`` that a break at ``sites`` cuts."""
        rule = self.rules[index]
        for site in sites:
            if index not in site.rules:
                continue
            cut = site.cut
            for match in rule.pattern.finditer(site.joined):
                if not match.start() < cut < match.end():
                    continue
                # The prefix is before the break, where the prefilter finds it.
                if not any(
                    anchor.search(site.joined, match.start(), cut)
                    for anchor in rule.compiled_anchors
                ):
                    continue
                start = site.context_start + match.start()
                if _complete_before_the_break(rule, text, start, length=cut - match.start()):
                    continue
                span = rule.span(match)
                if span is None or not span[0] < cut < span[1]:
                    continue
                yield site.to_body(span[0], end=False), site.to_body(span[1], end=True)


def _complete_before_the_break(rule: Rule, text: str, start: int, *, length: int) -> bool:
    """Whether the part of the token before the break is a whole token of ``rule`` already."""
    if rule.full_length is not None and length < rule.full_length:
        return False
    alone = rule.pattern.match(text, start)
    return alone is not None and rule.span(alone) is not None
