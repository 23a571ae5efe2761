"""The one markdown renderer: what an agent wrote, made safe for an operator to read.

Agents write markdown, and anything they write may be hostile: a transcript
is read by a logged-in operator, so a script in a message would run with the
operator's admin session. Bodies therefore go through three steps, each
sufficient on its own for the common attacks:

1. markdown-it-py parses them with raw HTML off: ``<script>`` is text, and
   its link validation already refuses ``javascript:`` and most ``data:`` URLs;
2. the HTML it renders is cleaned by nh3 (ammonia) with a short list of tags
   and attributes: no images (an ``<img>`` could track who reads), no
   ``style``, no ``class`` but plumb's own mention marker, links only to
   http, https and mailto, relative links dropped, and every link gets
   ``rel="nofollow noopener"``;
3. everything else on the page (names, reasons, verdicts) is plain text that
   the template escapes.

Names are shown with :func:`common.text.visible`, so a display name that
hides a zero-width space or a bidi override shows ``<U+200B>``. Bidi controls
inside bodies are written out the same way (they can make text read in an
order other than the one it was typed in); other invisible characters stay,
since emoji sequences need them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from html import escape

import nh3
import regex
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt
from markdown_it.token import Token

from common import limits
from common.text import normalize_handle, visible

_MARKDOWN = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])

_CLEANER = nh3.Cleaner(
    tags={
        "a",
        "blockquote",
        "br",
        "code",
        "del",
        "em",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "hr",
        "li",
        "ol",
        "p",
        "pre",
        "s",
        "span",
        "strong",
        "table",
        "tbody",
        "td",
        "th",
        "thead",
        "tr",
        "ul",
    },
    attributes={"a": {"href", "title"}, "ol": {"start"}},
    allowed_classes={"span": {"mention", "image-link"}},
    link_rel="nofollow noopener",
    url_schemes={"http", "https", "mailto"},
    url_relative="deny",
)

_BIDI = regex.compile(r"\p{Bidi_Control}")
# An at sign (or a compatibility form NFKC folds into one) and the token after it, as
# rooms.mentions reads them: letters, marks and digits of any script, ".", "_", "-" and
# invisible characters. The lookbehind keeps addresses (me@example.com, host/@bob) out.
_MENTION = regex.compile(
    r"(?<![\p{L}\p{M}\p{N}_/.+@-])[@\uFF20\uFE6B]"
    r"([\p{L}\p{M}\p{N}._\-\p{Default_Ignorable_Code_Point}\p{Bidi_Control}]+)"
)


def _render_image(self, tokens: list[Token], idx: int, options, env) -> str:
    """An image becomes a link to it: a transcript loads nothing from elsewhere."""
    token = tokens[idx]
    alt = self.renderInlineAsText(token.children or [], options, env) or "image"
    src = token.attrGet("src") or ""
    return f'<a href="{escape(str(src))}"><span class="image-link">image: {escape(alt)}</span></a>'


_MARKDOWN.add_render_rule("image", _render_image)


def show_bidi(text: str) -> str:
    """Write bidi-control characters as ``<U+202E>`` (names use ``visible`` for all)."""
    return _BIDI.sub(lambda match: f"<U+{ord(match.group()):04X}>", text)


def visible_html(text: str) -> SafeString:
    """``visible(text)`` as HTML, each hidden character a marked ``<U+XXXX>`` badge.

    Marked character by character from the original text, so that someone who
    types a literal "<U+200B>" into a display name does not get the badge.
    """
    parts = []
    for char in text:
        shown = visible(char)
        if shown == char:
            parts.append(escape(char))
        else:
            parts.append(f'<span class="plumb-invisible" title="invisible">{escape(shown)}</span>')
    # Every character above went through escape() or is a fixed marker.
    return mark_safe("".join(parts))


def _mention_end(token: str, handles: set[str]) -> int:
    """Length of the longest prefix of ``token`` that is a resolved handle, else 0.

    Trailing ".", "_" and "-" are punctuation unless a handle needs them: the
    prefixes tried are the token less none, some or all of its trailing run of
    them. Linear in the token, however long that run (normalising every
    prefix anew would be quadratic: seconds for 16 000 dots). ``normalize_handle``
    leaves these ASCII characters as they are and never joins them to what
    precedes them (none is the second half of a composition), so each prefix
    normalises to the stem's form plus the punctuation it keeps. No handle is
    longer than ``NAME_MAX`` (``HANDLE_PATTERN``), so longer prefixes are not
    tried, as ``rooms.mentions`` bounds its readings.
    """
    stem_end = len(token.rstrip("._-"))
    stem = normalize_handle(token[:stem_end])
    longest = min(len(token), stem_end + limits.NAME_MAX - len(stem))
    for end in range(longest, stem_end - 1, -1):
        if stem + token[stem_end:end] in handles:
            return end
    return 0


def _split_mentions(text: str, handles: set[str]) -> list[Token]:
    pieces: list[Token] = []
    plain_from = 0
    for match in _MENTION.finditer(text) if handles else ():
        end = _mention_end(match.group(1), handles)
        if not end:
            continue
        typed = match.group(1)[:end]
        if match.start() > plain_from:
            pieces.append(_text(text[plain_from : match.start()]))
        span = Token("html_inline", "", 0)
        span.content = f'<span class="mention">@{escape(visible(typed))}</span>'
        pieces.append(span)
        plain_from = match.start(1) + end
    if plain_from < len(text):
        pieces.append(_text(text[plain_from:]))
    return pieces


def _text(content: str) -> Token:
    token = Token("text", "", 0)
    token.content = show_bidi(content)
    return token


def _mark_inline(children: list[Token], handles: set[str]) -> list[Token]:
    marked: list[Token] = []
    for child in children:
        if child.type == "text":
            marked.extend(_split_mentions(child.content, handles))
        else:
            if child.type == "code_inline":
                child.content = show_bidi(child.content)
            if child.children:
                child.children = _mark_inline(child.children, handles)
            marked.append(child)
    return marked


class RenderBudget:
    """The time one page may spend rendering markdown; past it, bodies are shown as text.

    plumb's own passes are linear, but markdown-it-py's link parser is slow on
    crafted input: 16 KB of ``[`` take about 0.45 s to render, and a page holds
    200 events. So a page renders bodies until it has spent ``seconds``, and
    shows the rest as escaped plain text (``plain_text``), which costs
    microseconds: a page costs at most the budget plus one body.
    """

    def __init__(self, seconds: float, *, clock: Callable[[], float] = time.perf_counter):
        self.seconds = seconds
        self.spent = 0.0
        self._clock = clock

    @property
    def exhausted(self) -> bool:
        return self.spent >= self.seconds

    def render(self, text: str, *, mentions: Iterable[str] = ()) -> SafeString:
        if self.exhausted:
            return plain_text(text)
        started = self._clock()
        try:
            return render_markdown(text, mentions=mentions)
        finally:
            self.spent += self._clock() - started


def plain_text(text: str) -> SafeString:
    """A body as it was typed, escaped, bidi controls shown: what a page shows past its budget."""
    shown = escape(show_bidi(text))
    return mark_safe(f'<pre class="plumb-unrendered" style="white-space: pre-wrap">{shown}</pre>')


def render_markdown(text: str, *, mentions: Iterable[str] = ()) -> SafeString:
    """Render an agent's markdown to sanitised HTML; ``mentions`` are handles to highlight.

    Only handles the send resolved are highlighted (a typed ``@nobody`` stays
    text), each shown as typed with its invisible characters made visible.
    """
    handles = {normalize_handle(handle) for handle in mentions}
    env: dict = {}
    tokens = _MARKDOWN.parse(text, env)
    for token in tokens:
        if token.type == "inline" and token.children:
            token.children = _mark_inline(token.children, handles)
        elif token.type in ("fence", "code_block"):
            token.content = show_bidi(token.content)
    html = _MARKDOWN.renderer.render(tokens, _MARKDOWN.options, env)
    # Sanitised just above, by an allow-list cleaner: safe to mark.
    return mark_safe(_CLEANER.clean(html))
