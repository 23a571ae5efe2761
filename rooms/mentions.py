"""Find and resolve ``@handle`` mentions in a room message (SPEC 4.2 step 6).

Pure functions with no Django or database access: the rooms service passes in the current
members and stores what comes back.

Where a mention can be (decisions the SPEC leaves open are marked *choice*):

* Only text that a reader sees as markdown prose counts. The body is parsed with
  markdown-it-py's CommonMark preset and only the text of ``inline`` tokens (paragraphs,
  headings, list items, blockquotes, link text, emphasis) is searched. Inline code, fenced
  and indented code blocks, autolinks (``<https://host/@bob>``), link targets and titles,
  reference definitions and images (alt text and source) never mention anyone.
* *choice*: link text is prose, so ``[@bob](https://x)`` mentions bob, as it would in Slack
  or Zulip: the reader sees "@bob".
* *choice*: raw HTML is not rendered by plumb, and HTML blocks may hold comments or markup,
  so an HTML block and the inside of an inline tag (``<a title="@bob">``) are skipped. Text
  between inline tags (``<b>@bob</b>``) is ordinary prose and counts.
* *choice*: an at sign written as an escape or entity (``\\@bob``, ``&#64;bob``) is the
  author's way of writing a literal "@", so it does not start a mention.
* Formatting markers are transparent: the search runs over the text as it reads, so
  ``**@bob**`` mentions bob and ``**x**@bob`` is glued to "x". ``typed`` strings are the
  token as it reads (escapes and entities inside it decoded), which for ordinary text is
  exactly what was typed.

What a mention looks like:

* An at sign (``@``, or a compatibility form such as fullwidth U+FF20 that NFKC turns into
  ``@``) not glued to a preceding word character, ``/``, ``.``, ``-``, ``+`` or ``@``
  (``me@example.com``, ``https://host/@bob``). Invisible characters directly before the at
  sign are looked through, so ``me\\u200b@example.com`` is still an address.
* The token runs over letters, digits and marks of any script (so that a Cyrillic look-alike
  is part of the token, not its end), ``.``, ``_``, ``-`` and invisible characters. Its first
  visible character must be a letter or digit; a lone ``@`` or ``@_x`` is not mention-shaped.
* *choice*: a token followed directly by another at sign (``@bob@alice``,
  ``@bob@mastodon.social``) is an address, not a mention, and neither part is reported.
* Trailing ``.``, ``_`` and ``-`` are punctuation unless a handle needs them: the longest
  token is tried first, then one trailing character fewer at a time.

How a token resolves (handles only, never display names):

* Typed text and handles are compared after :func:`normalize_handle` (NFKC, case folding,
  removal of invisible characters). Case and compatibility forms (fullwidth letters) resolve
  silently; a token that needed invisible characters removed resolves with an
  ``invisible_characters`` warning.
* A token that matches no handle but has the same Unicode TR39 skeleton as one (Cyrillic
  U+043E for ``o``, ``1`` for ``l``) does not resolve: it is unresolved and gets a
  ``confusable`` warning naming each member it looks like.

Cost: most messages mention no one. Every mention, unresolved token and warning starts at an
at sign in the body, so :func:`resolve_mentions` returns at once for a body without one
(:func:`may_mention`) and parses markdown only for the others.
"""

from __future__ import annotations

import functools
import unicodedata
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import regex
from confusable_homoglyphs.confusables import confusables_data
from markdown_it import MarkdownIt
from markdown_it.token import Token

from common import limits
from common.text import INVISIBLE, normalize_handle


@dataclass(frozen=True)
class Member:
    """A current room member as the caller passes it in."""

    handle: str
    display_name: str


@dataclass(frozen=True)
class MentionResult:
    """What a message body mentions.

    ``mentions``: resolved members in order of first appearance, each once.
    ``unresolved``: mention-shaped tokens that matched no member, as typed with the at sign,
    each distinct string once, in order. ``warnings``: ``{"typed", "handle", "reason"}``
    with reason ``invisible_characters`` (resolved) or ``confusable`` (not resolved).
    """

    mentions: list[Member]
    unresolved: list[str]
    warnings: list[dict[str, str]]


_TOKEN_CHAR = regex.compile(
    r"[\p{L}\p{N}\p{M}\p{Default_Ignorable_Code_Point}\p{Bidi_Control}._\-]"
)
_LETTER_OR_DIGIT = regex.compile(r"[\p{L}\p{N}]")
_WORD_CHAR = regex.compile(r"\w")
_GLUE_PUNCTUATION = frozenset("/.-+@")
_TRAILING_PUNCTUATION = frozenset("._-")
# Every character _is_at_sign() accepts: "@" and the two compatibility forms that NFKC turns
# into it, small U+FE6B and fullwidth U+FF20. The tests check this against every code point.
_AT_SIGNS = ("@", "\ufe6b", "\uff20")

# The CommonMark preset parses raw HTML into html_block/html_inline tokens, which lets them
# be skipped. text_join is disabled so that escapes and entities stay visible as
# text_special tokens: an escaped at sign must not start a mention.
_MARKDOWN = MarkdownIt("commonmark").disable("text_join")

# How much of the flattened inline text may take part in a mention.
_PROSE = 0  # may hold the at sign and the token
_ESCAPED = 1  # an escape or entity: part of a token, never its at sign
_CONTEXT = 2  # seen by the reader (code, autolink, line break) but never part of a token
# Stands in for an image or an inline HTML tag: visible (or gone) but not a word character.
_OBJECT = "\ufffc"


def extract_mention_tokens(body: str) -> list[str]:
    """Every mention-shaped ``@token`` in markdown text, as typed (with '@'), in order.

    Duplicates are kept. A token is given whole, including trailing ``.``, ``_`` or ``-``:
    whether those are punctuation depends on the members, which only
    :func:`resolve_mentions` knows.
    """
    return [at_sign + token for at_sign, token in _occurrences(body)]


def may_mention(body: str) -> bool:
    """Whether ``body`` can mention anyone; if not, it has no mention, token or warning either.

    A mention starts at an at sign in the prose, and the prose is the ``text`` tokens, which
    markdown-it cuts from the body itself (after normalising line endings). Everything else
    :func:`_flatten` adds (line breaks, code, autolinks, stand-ins for images and tags,
    escapes and entities decoded, such as ``\\@`` and ``&#64;``) never holds a mention's at
    sign. So a body without any of ``_AT_SIGNS`` yields nothing, and looking for invisible or
    look-alike characters would not change that: they only count inside a token, after its
    at sign.
    """
    return any(at_sign in body for at_sign in _AT_SIGNS)


def resolve_mentions(body: str, members: Iterable[Member]) -> MentionResult:
    """Resolve the mentions in ``body`` against the room's current ``members``.

    The same result as :func:`resolve_mentions_full`, at once for a body without an at sign.
    """
    if not may_mention(body):
        return MentionResult(mentions=[], unresolved=[], warnings=[])
    return resolve_mentions_full(body, members)


def resolve_mentions_full(body: str, members: Iterable[Member]) -> MentionResult:
    """Resolve the mentions in ``body`` against ``members``, always parsing the markdown.

    Exact matches (after :func:`normalize_handle`) win over look-alikes at any length:
    ``@bob.`` resolves to ``bob`` even if some other member's skeleton equals ``bob.``.
    """
    by_handle: dict[str, Member] = {}
    by_skeleton: dict[str, list[Member]] = defaultdict(list)
    for member in members:
        normalized = normalize_handle(member.handle)
        if normalized not in by_handle:
            by_handle[normalized] = member
            by_skeleton[_skeleton(normalized)].append(member)

    # A skeleton is never shorter than its text (NFD and prototypes only add characters), so
    # a reading longer than every skeleton is dismissed before its own is computed. Measured
    # once, not per token: a body holds thousands of tokens and a room may hold as many members.
    longest_skeleton = max(map(len, by_skeleton), default=0)

    mentions: dict[str, Member] = {}
    unresolved: dict[str, None] = {}
    warnings: dict[tuple[str, str, str], None] = {}
    for at_sign, token in _occurrences(body):
        candidates = _candidates(token)
        resolved = _resolve_exact(candidates, by_handle)
        if resolved is not None:
            typed, member = resolved
            mentions.setdefault(member.handle, member)
            if INVISIBLE.search(typed):
                warnings[(at_sign + typed, member.handle, "invisible_characters")] = None
            continue
        lookalike = _resolve_confusable(candidates, by_skeleton, longest_skeleton)
        if lookalike is None:
            unresolved[at_sign + candidates[-1]] = None
            continue
        typed, lookalike_members = lookalike
        unresolved[at_sign + typed] = None
        for member in lookalike_members:
            warnings[(at_sign + typed, member.handle, "confusable")] = None

    return MentionResult(
        mentions=list(mentions.values()),
        unresolved=list(unresolved),
        warnings=[
            {"typed": typed, "handle": handle, "reason": reason}
            for typed, handle, reason in warnings
        ],
    )


def _candidates(token: str) -> list[str]:
    """The readings of a token to try, longest first; the last one is fully stripped.

    Trailing ``.``, ``_`` and ``-`` are dropped one at a time, each with any invisible
    characters that follow it; invisible characters before it stay with the handle, where
    they still earn a warning (``@bob<U+200B>.``). Readings that keep more trailing
    punctuation than a handle can hold are not tried, so that a body full of dots costs
    linear time.
    """
    start = len(token)
    while _is_trailing_punctuation(token[start - 1]):
        start -= 1
    cuts = [index for index in range(start, len(token)) if not INVISIBLE.match(token[index])]
    candidates = [token]
    for kept in range(min(len(cuts) - 1, limits.NAME_MAX), -1, -1):
        candidates.append(token[: cuts[kept]])
    return candidates


def _resolve_exact(
    candidates: list[str], by_handle: dict[str, Member]
) -> tuple[str, Member] | None:
    for candidate in candidates:
        member = by_handle.get(normalize_handle(candidate))
        if member is not None:
            return candidate, member
    return None


def _resolve_confusable(
    candidates: list[str], by_skeleton: dict[str, list[Member]], longest_skeleton: int
) -> tuple[str, list[Member]] | None:
    for candidate in candidates:
        normalized = normalize_handle(candidate)
        if len(normalized) > longest_skeleton:
            continue
        lookalikes = by_skeleton.get(_skeleton(normalized))
        if lookalikes:
            return candidate, lookalikes
    return None


def _occurrences(body: str) -> Iterator[tuple[str, str]]:
    """Yield ``(at_sign, token)`` for every mention-shaped token in the markdown prose.

    Block tokens other than ``inline`` (code blocks, fences, HTML blocks) are never looked
    at. Each inline token is flattened into the text a reader sees, with a kind per
    character, and scanned for at signs.
    """
    for block in _MARKDOWN.parse(body):
        if block.type != "inline" or not block.children:
            continue
        text, kinds = _flatten(block.children)
        for index, char in enumerate(text):
            if kinds[index] != _PROSE or not _is_at_sign(char) or _is_glued(text, index):
                continue
            end = index + 1
            while end < len(text) and kinds[end] != _CONTEXT and _is_token_char(text[end]):
                end += 1
            if end < len(text) and _is_at_sign(text[end]):
                continue  # an address such as @bob@mastodon.social
            token = text[index + 1 : end]
            if _is_mention_shaped(token):
                yield char, token


def _flatten(children: list[Token]) -> tuple[str, list[int]]:
    parts: list[str] = []
    kinds: list[int] = []
    for content, kind in _segments(children):
        parts.append(content)
        kinds.extend([kind] * len(content))
    return "".join(parts), kinds


def _segments(children: list[Token]) -> Iterator[tuple[str, int]]:
    in_autolink = False
    for token in children:
        if token.type in ("link_open", "link_close") and token.markup == "autolink":
            in_autolink = token.type == "link_open"
        elif token.type == "text":
            yield token.content, _CONTEXT if in_autolink else _PROSE
        elif token.type == "text_special":
            yield token.content, _CONTEXT if in_autolink else _ESCAPED
        elif token.type in ("softbreak", "hardbreak"):
            yield "\n", _CONTEXT
        elif token.type == "code_inline":
            # Kept (not blanked) so that `x`@bob reads as glued, as it looks.
            yield token.content, _CONTEXT
        elif token.type in ("image", "html_inline"):
            yield _OBJECT, _CONTEXT
        # Emphasis and link open/close tokens carry no visible text.


def _nfkc(char: str) -> str:
    return unicodedata.normalize("NFKC", char)


def _is_at_sign(char: str) -> bool:
    return char == "@" or (not char.isascii() and _nfkc(char) == "@")


def _is_glued(text: str, index: int) -> bool:
    before = index - 1
    while before >= 0 and INVISIBLE.match(text[before]):
        before -= 1
    if before < 0:
        return False
    char = text[before]
    return bool(_WORD_CHAR.match(char)) or _nfkc(char) in _GLUE_PUNCTUATION


def _is_token_char(char: str) -> bool:
    return bool(_TOKEN_CHAR.match(char)) or _nfkc(char) in _TRAILING_PUNCTUATION


def _is_trailing_punctuation(char: str) -> bool:
    return bool(INVISIBLE.match(char)) or _nfkc(char) in _TRAILING_PUNCTUATION


def _is_mention_shaped(token: str) -> bool:
    for char in token:
        if not INVISIBLE.match(char):
            return bool(_LETTER_OR_DIGIT.match(char))
    return False


def _skeleton(text: str) -> str:
    """A string equal for two texts exactly when their Unicode TR39 skeletons are equal.

    TR39: NFD, map every character through confusables.txt, NFD again. The texts passed in
    are already normalized (case-folded), so case never makes two handles confusable.
    """
    prototypes = _prototypes()
    mapped = "".join(prototypes.get(char, char) for char in unicodedata.normalize("NFD", text))
    return unicodedata.normalize("NFD", mapped)


@functools.cache
def _prototypes() -> dict[str, str]:
    """Recover confusables.txt's character -> prototype table from confusable-homoglyphs.

    The package stores each line "source -> prototype" of Unicode's confusables.txt both
    ways round (and wraps right-to-left characters in U+200E marks for display), so the
    direction has to be recovered. Every source maps straight to its prototype and no
    prototype is a source, so each connected group of the table is one prototype with its
    sources. The prototype is the group's multi-character member if it has one (m -> rn),
    else the member linked to all the others; in a group of two, the one listed second, as
    the package stores a line's source before its prototype. This reproduces the TR39
    skeleton of every code point (checked against confusables.txt for the pinned version).
    Built on first use (about 20 ms).
    """
    parent: dict[str, str] = {}

    def root(node: str) -> str:
        parent.setdefault(node, node)
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    links: dict[str, int] = defaultdict(int)
    position: dict[str, int] = {}
    for char, entries in confusables_data.items():
        node = char.replace("\u200e", "")
        position.setdefault(node, len(position))
        for entry in entries:
            links[node] += 1
            parent[root(node)] = root(entry["c"].replace("\u200e", ""))

    groups: dict[str, list[str]] = defaultdict(list)
    for node in list(parent):
        groups[root(node)].append(node)

    prototypes: dict[str, str] = {}
    for nodes in groups.values():
        prototype = min(nodes, key=lambda node: (-len(node), -links[node], -position[node]))
        prototypes.update((node, prototype) for node in nodes if len(node) == 1)
    return prototypes
