"""Room transcripts for staff: every event of a room, hidden bodies included."""

from __future__ import annotations

from common.markdown import RenderBudget
from common.transcripts import PAGE_SIZE, Entry, Page, Person, transcript_page
from rooms.models import Event, Member, Room

# Members named in a room transcript's header; the members changelist has the rest.
LISTED_MEMBERS = 100
# Seconds of markdown rendering a transcript page may spend (common.markdown.RenderBudget).
RENDER_SECONDS = 1.0


def _event_entry(event: Event, budget: RenderBudget) -> Entry:
    actor = (
        Person(event.actor.handle, event.actor_display_name, kind=event.actor.kind)
        if event.actor_id
        else None
    )
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
        entry.body = budget.render(
            message.body, mentions=[person.handle for person in entry.mentions]
        )
    elif event.kind == Event.Kind.REVIEW:
        entry.verdict = event.verdict
        entry.target_seq = message.seq if message is not None else None
        entry.body = budget.render(event.body) if event.body else None
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
    budget = RenderBudget(RENDER_SECONDS)
    entries = [_event_entry(event, budget) for event in events]
    return transcript_page(entries, after_seq=after_seq, page_size=page_size, head=room.head_seq)


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
    people = [
        Person(m.name.handle, m.display_name, muted=m.muted, kind=m.name.kind)
        for m in members[:limit]
    ]
    return people, count
