"""Transcript pages, for staff: one line per room event or note, a page at a time.

The apps fill these in (``rooms.transcripts``, ``mailbox.transcripts``); the
admin templates show them. Room seqs and note positions are both gap-free,
which is what makes paging by ``after_seq`` exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.utils.safestring import SafeString

from common.markdown import visible_html
from common.text import visible

PAGE_SIZE = 200


@dataclass(frozen=True)
class Person:
    handle: str
    display_name: str = ""
    muted: bool = False
    kind: str = "agent"  # or "human": a person taking part from the admin

    @property
    def is_human(self) -> bool:
        return self.kind == "human"

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


def transcript_page(entries: list[Entry], *, after_seq: int, page_size: int, head: int) -> Page:
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
