"""Redact secrets from message bodies before they are stored (SPEC 3.5).

Agents paste shell sessions, configs and logs into notes and rooms. A body is
kept for every reader of the conversation, so a credential in it would leak to
all of them, to the database and to backups. Scrubbing happens once, on the
way in, and replaces each secret with ``[REDACTED:<kind>]`` so readers still
see that something was there and what it was.

The rules (``rules.py``) are a priority-ordered table. Every rule is matched
against the original body; a match that overlaps a span already claimed by an
earlier rule (or an existing ``[REDACTED:...]`` marker) is dropped. So the most
specific kind wins: a JWT after ``Authorization: Bearer`` is reported as
``jwt``, a GitHub token in ``password=...`` or as the password of a URL as
``github_token``. Markers are never matched and claim their span, and
scrub() repeats its pass until nothing more is found, so scrubbing is
idempotent.

False positives are bugs too: hashes, UUIDs, code and prose must survive byte
for byte. Prefixed token formats are therefore anchored on both sides (glue
that no token holds, such as ``%3D`` or ``MY_TOKEN_``, does not count). A
token glued to a word in front (``tokenghp_...``) is still one if it stands
clear behind and, where words end with its prefix (``laughs_``,
``task_test_``), holds a digit; a glued JWT's header has to decode to JSON.
The context-driven rules (assignments, ``Bearer``, URL passwords) only fire on
values that look like a literal, not like a reference, a type or a
placeholder. Leaks are worse: a value is redacted whole, up to the
punctuation inside it (``Tr0ub4dor&3``), and a token that a terminal wrapped
onto two lines is joined again (``wrap.py``).

Tokens pasted back to back (``ghp_...ghp_...``, a JWT and then a token) are
two secrets, though each token's pattern runs on into the next one. Such a run
is cut where the next token starts, and the rules read the body with a blank
there (``runs.py``), so each token is redacted whole and counted.

Every rule starts at a literal (a prefix, a keyword, ``://``) or a token
boundary, and its repeats are possessive or run over a class that cannot match
what follows them, so a 16 KB body is scanned in near-linear time with no
catastrophic backtracking. Cutting a run reads each stretch between two
prefixes a bounded number of times.

Secrets disguised with fullwidth letters or zero-width characters are found
in a folded view of the body (NFKC, invisible characters left out), which is
only read: the stored text is the body with the secrets' own characters
replaced (``lookalikes.py``).

Most bodies hold no secret, so ``scrub`` first asks the prefilter whether any
rule can match at all (``prefilter.py``) and runs the table only if so;
``scrub_full`` always runs it. The package splits the rule table
(``rules.py``) from the checks that tell a literal secret from a reference or
a placeholder (``refine.py``), from the joining of wrapped tokens
(``wrap.py``), from the cutting of glued runs (``runs.py``) and from the
folded view (``lookalikes.py``).
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from common.scrubbing import lookalikes, runs
from common.scrubbing.prefilter import Prefilter
from common.scrubbing.refine import Span
from common.scrubbing.rules import RULES, Rule
from common.scrubbing.wrap import Site, Unwrapper

__all__ = ["ScrubResult", "scrub", "scrub_full"]

_MARKER_RE = re.compile(r"\[REDACTED:[a-z0-9_]+\]")
# A bound on scrub()'s passes that real bodies never reach (they need one, plus
# one that finds nothing); it only caps the work an adversarial body can cause.
_MAX_PASSES = 8


@dataclass(frozen=True)
class ScrubResult:
    text: str
    scrubbed: list[dict[str, object]]


_PREFILTER = Prefilter(RULES)
_UNWRAPPER = Unwrapper(RULES)
_RUNS = runs.Runs(RULES)


def _overlaps(taken: list[Span], span: Span) -> bool:
    """Whether ``span`` overlaps any span in ``taken`` (sorted, disjoint)."""
    index = bisect.bisect_left(taken, span)
    if index < len(taken) and taken[index][0] < span[1]:
        return True
    return index > 0 and taken[index - 1][1] > span[0]


def _spans(index: int, rule: Rule, text: str, sites: Sequence[Site]) -> Iterator[Span]:
    """The non-empty spans that rule ``index`` redacts in ``text``, in order of preference."""
    # A token cut by a line break first: its first line alone may also match
    # (a fine-grained GitHub token), and must not win.
    wrapped = _UNWRAPPER.spans(index, text, sites) if rule.wraps and sites else ()
    plain = (rule.span(match) for match in rule.pattern.finditer(text))
    for span in itertools.chain(wrapped, plain):
        if span is not None and span[0] < span[1]:
            yield span


def _claim_folded(taken: list[Span], claimed: list[Span], span: Span) -> None:
    """Claim a span that a rule found in the folded view, joined with its own overlapping ones.

    The body and its view may end one secret at different places (a fullwidth
    quote ends a bare value only in the view, a zero-width space ends a token
    only in the body), so the two spans are joined: no part of either is left.
    ``taken`` and ``claimed`` (the rule's own spans) are sorted and disjoint.
    """
    start, end = span
    first = bisect.bisect_left(claimed, span)
    if first > 0 and claimed[first - 1][1] > start:
        first -= 1
    last = first
    while last < len(claimed) and claimed[last][0] < end:
        last += 1
    joined = claimed[first:last]
    if joined:
        start, end = min(start, joined[0][0]), max(end, joined[-1][1])
        if joined == [(start, end)]:
            return
    for old in joined:
        taken.remove(old)
    if _overlaps(taken, (start, end)):
        for old in joined:
            bisect.insort(taken, old)
        return
    bisect.insort(taken, (start, end))
    claimed[first:last] = [(start, end)]


def _find(text: str) -> list[tuple[int, int, str]]:
    """One pass of the rule table: disjoint ``(start, end, kind)`` spans, sorted."""
    folded = lookalikes.view(text)
    cuts = _RUNS.cuts(text)
    if folded is not None:
        # A run in disguise is cut in the view, so in front of the body's
        # character that the view's cut came from.
        folded_cuts = (folded.origins[cut] for cut in _RUNS.cuts(folded.text))
        cuts = sorted({*cuts, *folded_cuts})
    if not cuts:
        return _find_in(text, folded)
    split = runs.split(text, cuts)
    return [
        (split.to_body(start), split.to_body(end), kind)
        for start, end, kind in _find_in(split.text, lookalikes.view(split.text))
    ]


def _find_in(text: str, folded: lookalikes.View | None) -> list[tuple[int, int, str]]:
    """``_find`` on ``text``, whose folded view is ``folded``."""
    # Markers already in the text claim their span, so a redaction is never
    # nested in or reported over another one.
    taken: list[Span] = [marker.span() for marker in _MARKER_RE.finditer(text)]
    found: list[tuple[int, int, str]] = []
    sites = _UNWRAPPER.find_sites(text)
    folded_sites = _UNWRAPPER.find_sites(folded.text) if folded is not None else []
    for index, rule in enumerate(RULES):
        claimed: list[Span] = []
        for span in _spans(index, rule, text, sites):
            if not _overlaps(taken, span):
                bisect.insort(taken, span)
                bisect.insort(claimed, span)
        if folded is not None:
            for span in _spans(index, rule, folded.text, folded_sites):
                _claim_folded(taken, claimed, folded.to_body(span))
        found.extend((start, end, rule.kind) for start, end in claimed)
    found.sort()
    return found


def _replace(
    text: str, found: list[tuple[int, int, str]], written: list[tuple[int, str]]
) -> tuple[str, list[tuple[int, str]]]:
    """Write the markers for ``found`` and move the earlier markers' positions along."""
    events = sorted(
        [(start, 0, start, kind) for start, kind in written]
        + [(start, 1, end, kind) for start, end, kind in found]
    )
    parts: list[str] = []
    moved: list[tuple[int, str]] = []
    position = 0
    shift = 0
    for start, is_new, end, kind in events:
        moved.append((start + shift, kind))
        if not is_new:
            continue
        marker = f"[REDACTED:{kind}]"
        parts.append(text[position:start])
        parts.append(marker)
        position = end
        shift += len(marker) - (end - start)
    parts.append(text[position:])
    return "".join(parts), moved


def scrub(text: str) -> ScrubResult:
    """Replace each secret in ``text`` with ``[REDACTED:<kind>]``; see ``scrub_full``.

    The same result as ``scrub_full``, found faster for a body in which no
    rule's pattern can match, in the body or in its folded view: that body
    comes back unchanged at once.
    """
    if not _PREFILTER.may_match(text):
        folded = lookalikes.view(text)
        if folded is None or not _PREFILTER.may_match(folded.text):
            return ScrubResult(text=text, scrubbed=[])
    return scrub_full(text)


def scrub_full(text: str) -> ScrubResult:
    """Replace each secret in ``text`` with ``[REDACTED:<kind>]``, running every rule.

    ``scrubbed`` lists each kind once, in order of its first appearance, with
    how many secrets of that kind were replaced, so the sender learns what
    was removed without the value being echoed back.

    A match that loses an overlap is dropped whole, yet once the winner has
    become a marker the loser's shorter remainder may match on its own. So
    passes repeat until one finds nothing: the result is a fixed point, and
    scrubbing it again changes and reports nothing. Every productive pass
    turns at least one character that is not a marker into one, so this ends;
    in practice the second pass only confirms the first.
    """
    written: list[tuple[int, str]] = []
    for _ in range(_MAX_PASSES):
        found = _find(text)
        if not found:
            break
        text, written = _replace(text, found, written)
    counts: dict[str, int] = {}
    for _, kind in sorted(written):
        counts[kind] = counts.get(kind, 0) + 1
    return ScrubResult(
        text=text,
        scrubbed=[{"kind": kind, "count": count} for kind, count in counts.items()],
    )
