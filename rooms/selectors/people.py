"""What a person's inbox reads (SPEC §5.1): their unread count, their mentions.

Here rather than in ``mailbox`` because it reads both halves: notes waiting
for the person and messages that mention them.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, IntegerField, Max, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce

from mailbox.models import Conversation, Note, Person
from rooms.models import MessageMention


@dataclass(frozen=True)
class Unread:
    """A person's handle and what waits for them: notes, and mentions not yet shown."""

    handle: str
    notes: int
    mentions: int

    @property
    def total(self) -> int:
        return self.notes + self.mentions


def _count(queryset, group: str) -> Coalesce:
    counted = queryset.order_by().values(group).annotate(count=Count("pk")).values("count")
    return Coalesce(Subquery(counted, output_field=IntegerField()), Value(0))


def person_unread(user_id: int) -> Unread | None:
    """The header's count, on every admin page: one query, None for a user with no handle.

    Notes to a person are never bound to a session (theirs is never
    connected), so the waiting ones are exactly the ``note_pending_name``
    index's entries for their name; mentions are read from
    ``mention_by_name`` above the last one their inbox showed them.
    """
    waiting = Note.objects.filter(
        recipient_id=OuterRef("name_id"), delivered_at__isnull=True, bound_session__isnull=True
    )
    mentioned = MessageMention.objects.filter(
        name_id=OuterRef("name_id"), id__gt=OuterRef("mentions_seen")
    )
    row = (
        Person.objects.filter(user_id=user_id)
        .annotate(notes=_count(waiting, "recipient_id"), mentions=_count(mentioned, "name_id"))
        .values_list("name__handle", "notes", "mentions")
        .first()
    )
    return Unread(*row) if row is not None else None


def person_mentions(name_id: int, *, limit: int) -> list[MessageMention]:
    """The newest mentions of a name, newest first, each with its message, room and author."""
    return list(
        MessageMention.objects.filter(name_id=name_id)
        .select_related("message__room", "message__author")
        .order_by("-id")[:limit]
    )


def person_inbox_state(person: Person) -> str:
    """A string that changes whenever the person's inbox would: a note to or from
    them, a new mention, or a note delivered. Read by the inbox's refresh."""
    latest = Conversation.objects.filter(participants__name_id=person.name_id).aggregate(
        last=Max("last_note_at")
    )["last"]
    unread = person_unread(person.user_id)
    newest_mention = (
        MessageMention.objects.filter(name_id=person.name_id).aggregate(last=Max("id"))["last"] or 0
    )
    total = unread.total if unread is not None else 0
    return f"{latest.isoformat() if latest else '-'}/{newest_mention}/{total}"
