"""Transcripts of rooms and conversations for staff, and the one markdown renderer.

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

Names are shown with :func:`rooms.mentions.visible`, so a display name that
hides a zero-width space or a bidi override shows ``<U+200B>``. Bidi controls
inside bodies are written out the same way (they can make text read in an
order other than the one it was typed in); other invisible characters stay,
since emoji sequences need them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from html import escape

import nh3
import regex
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt
from markdown_it.token import Token

from mailbox.models import Conversation, Note, Participant
from rooms.mentions import normalize_handle, visible
from rooms.models import Event, Member, Room

PAGE_SIZE = 200
# Members named in a room transcript's header; the members changelist has the rest.
LISTED_MEMBERS = 100

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

    Trailing ".", "_" and "-" are punctuation unless a handle needs them.
    """
    end = len(token)
    while end > 0:
        if normalize_handle(token[:end]) in handles:
            return end
        if token[end - 1] not in "._-":
            return 0
        end -= 1
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


# --- pages ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Person:
    handle: str
    display_name: str = ""
    muted: bool = False

    @property
    def display_name_visible(self) -> str:
        return visible(self.display_name)

    @property
    def display_name_html(self) -> SafeString:
        return visible_html(self.display_name)


@dataclass
class Entry:
    """One line of a transcript: a room event or a note, ready to display."""

    seq: int
    kind: str
    created_at: datetime
    actor: Person | None = None
    body: SafeString | None = None
    hidden: bool = False
    hidden_reason: str = ""
    public_id: str = ""
    reply_to_seq: int | None = None
    target_seq: int | None = None
    verdict: str = ""
    action: str = ""
    reason: str = ""
    member: str = ""
    recipient: str = ""
    delivered_at: datetime | None = None
    mentions: list[Person] = field(default_factory=list)


@dataclass
class Page:
    entries: list[Entry]
    after_seq: int
    page_size: int
    next_after: int | None  # None on the last page
    previous_after: int | None  # None on the first page
    last_page_after: int | None  # where the newest page starts, when not shown already

    @property
    def first_seq(self) -> int | None:
        return self.entries[0].seq if self.entries else None

    @property
    def last_seq(self) -> int | None:
        return self.entries[-1].seq if self.entries else None


def parse_after_seq(raw: str | None) -> int:
    """``?after_seq=`` as a non-negative integer; anything else starts at the beginning."""
    try:
        return max(int(raw or 0), 0)
    except (TypeError, ValueError):
        return 0


def _page(entries: list[Entry], *, after_seq: int, page_size: int, head: int) -> Page:
    has_more = len(entries) > page_size
    entries = entries[:page_size]
    next_after = entries[-1].seq if has_more and entries else None
    last_page_after = max(head - page_size, 0)
    return Page(
        entries=entries,
        after_seq=after_seq,
        page_size=page_size,
        next_after=next_after,
        # Room seqs and note positions are gap-free, so a page back is one page size back.
        previous_after=max(after_seq - page_size, 0) if after_seq > 0 else None,
        last_page_after=last_page_after
        if next_after is not None and last_page_after > next_after
        else None,
    )


def _event_entry(event: Event) -> Entry:
    actor = Person(event.actor.handle, event.actor_display_name) if event.actor_id else None
    entry = Entry(seq=event.seq, kind=event.kind, created_at=event.created_at, actor=actor)
    message = event.message
    if event.kind == Event.Kind.MESSAGE and message is not None:
        entry.public_id = message.public_id
        entry.hidden = message.hidden
        entry.hidden_reason = message.hidden_reason
        entry.reply_to_seq = message.reply_to.seq if message.reply_to_id else None
        entry.mentions = [
            Person(m.get("handle", ""), m.get("display_name", "")) for m in message.mentions
        ]
        entry.body = render_markdown(
            message.body, mentions=[person.handle for person in entry.mentions]
        )
    elif event.kind == Event.Kind.REVIEW:
        entry.verdict = event.verdict
        entry.target_seq = message.seq if message is not None else None
        entry.body = render_markdown(event.body) if event.body else None
    elif event.kind == Event.Kind.MODERATION:
        entry.action = event.data.get("action", "")
        entry.reason = event.data.get("reason", "")
        entry.member = event.data.get("member") or ""
        entry.target_seq = message.seq if message is not None else None
    return entry


def room_transcript(room: Room, *, after_seq: int, page_size: int = PAGE_SIZE) -> Page:
    """Events of ``room`` after ``after_seq``, oldest first, hidden bodies included (staff)."""
    events = (
        Event.objects.filter(room=room, seq__gt=after_seq)
        .select_related("actor", "message__reply_to")
        .order_by("seq")[: page_size + 1]
    )
    entries = [_event_entry(event) for event in events]
    return _page(entries, after_seq=after_seq, page_size=page_size, head=room.head_seq)


def room_members(room: Room, *, limit: int = LISTED_MEMBERS) -> tuple[list[Person], int]:
    """Current members for a transcript's header (the first ``limit``), and how many."""
    members = list(
        Member.objects.filter(room=room, left_at__isnull=True)
        .select_related("name")
        .order_by("joined_at", "id")[: limit + 1]
    )
    count = len(members)
    if count > limit:
        count = Member.objects.filter(room=room, left_at__isnull=True).count()
    people = [Person(m.name.handle, m.display_name, muted=m.muted) for m in members[:limit]]
    return people, count


def _note_entry(note: Note) -> Entry:
    sender = note.sender_name
    return Entry(
        seq=note.position,
        kind="note",
        created_at=note.created_at,
        actor=Person(sender.handle),
        body=render_markdown(note.body),
        public_id=note.public_id,
        recipient=(
            f"next session in {note.next_workspace}"
            if note.next_workspace_id
            else visible(note.recipient.handle)
        ),
        delivered_at=note.delivered_at,
    )


def conversation_transcript(
    conversation: Conversation, *, after_seq: int, page_size: int = PAGE_SIZE
) -> Page:
    """Notes of ``conversation`` after position ``after_seq``, oldest first."""
    notes = (
        Note.objects.filter(conversation=conversation, position__gt=after_seq)
        .select_related("sender_name", "recipient", "next_workspace__project")
        .order_by("position")[: page_size + 1]
    )
    entries = [_note_entry(note) for note in notes]
    return _page(entries, after_seq=after_seq, page_size=page_size, head=conversation.notes_count)


def conversation_participants(conversation: Conversation) -> list[Participant]:
    return list(
        Participant.objects.filter(conversation=conversation)
        .select_related("name__workspace__project")
        .order_by("joined_at", "id")
    )
