"""A project's export as JSON Lines (SPEC §8): streamed, in memory that stays flat.

One JSON object per line, each with a ``type``, in this order: the
``project``; each ``room`` (by slug) followed by its ``member`` lines and its
``event`` lines (by seq); then each ``conversation`` (by id) that a name of
the project takes part in, followed by its ``note`` lines (by position).
Events and notes are the objects the API returns for them (``read_messages``
and ``read_conversation``), so an export and the API agree line for line;
the one difference is that a hidden message keeps its stored body here (an
operator's export), with ``hidden_reason``. Bodies are exported as stored:
already scrubbed. The schema is in docs/operators.md ("Export").

Every table is read in pages of ``EXPORT_PAGE`` rows by keyset (seq,
position, primary key), never all at once, so the export of a project with
10^6 events holds one page at a time, whatever its size.

It lives in ``rooms`` because it reads both halves; it reads only.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from django.db.models import Prefetch, QuerySet
from django.utils import timezone

from common.text import visible
from mailbox.errors import ConversationNotFound
from mailbox.models import Conversation, Note, Participant, Project
from mailbox.representation import note_json, timestamp
from rooms.errors import RoomNotFound
from rooms.models import Event, Member, Room
from rooms.representation import event_json
from rooms.selectors import with_event_relations

EXPORT_PAGE = 1000
# The version of the line schema, on the project line; raised when a line changes shape.
EXPORT_SCHEMA = 1

_NOTE_RELATED = (
    "conversation",
    "recipient",
    "next_workspace",
    "sender_name__workspace__project",
    "delivered_to__name",
)


def export_lines(
    project: Project,
    *,
    room: str | None = None,
    conversation: str | None = None,
    since: datetime | None = None,
) -> Iterator[str]:
    """The project's export, a line at a time (each ending in a newline).

    ``room`` and ``conversation`` narrow it to that room or thread (both:
    both); ``since`` leaves out events and notes created before it (rooms,
    members and threads are still listed). Raises ``room_not_found`` and
    ``conversation_not_found`` for a room or thread that is not the
    project's, before the first line.
    """
    rooms = Room.objects.filter(project=project).order_by("slug")
    threads = _threads_of(project)
    if room is not None:
        rooms = rooms.filter(slug=room)
        if not rooms.exists():
            raise RoomNotFound(f"Project {project.slug} has no room {room!r}.")
    if conversation is not None:
        threads = threads.filter(public_id=conversation)
        if not threads.exists():
            raise ConversationNotFound(
                f"No conversation {conversation!r} has a participant of project {project.slug}."
            )
    every = room is None and conversation is None
    yield _line(_project_line(project, since))
    if every or room is not None:
        for each in _pages(rooms, "slug", lambda r: r.slug):
            yield from _room_lines(each, since)
    if every or conversation is not None:
        yield from _thread_lines(threads, since)


def _line(obj: dict[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n"


def _project_line(project: Project, since: datetime | None) -> dict[str, Any]:
    return {
        "type": "project",
        "schema": EXPORT_SCHEMA,
        "slug": project.slug,
        "name": project.name,
        "created_at": timestamp(project.created_at),
        "exported_at": timestamp(timezone.now()),
        "since": timestamp(since) if since is not None else None,
        "settings": {
            field: getattr(project, field)
            for field in (
                "mailbox_enabled",
                "max_exchanges",
                "accept_all_projects",
                "note_ttl",
                "daily_note_budget",
                "daily_message_budget",
                "room_flood_limit",
                "max_connected_sessions",
                "retention_days",
            )
        },
    }


def _room_lines(room: Room, since: datetime | None) -> Iterator[str]:
    yield _line(
        {
            "type": "room",
            "slug": room.slug,
            "title": room.title,
            "topic": room.topic,
            "locked": room.locked,
            "latest_seq": room.head_seq,
            "history_starts_at": room.history_starts_at,
            "created_at": timestamp(room.created_at),
        }
    )
    members = Member.objects.filter(room=room).select_related("name").order_by("pk")
    for member in _pages(members, "pk", lambda m: m.pk):
        yield _line(
            {
                "type": "member",
                "room": room.slug,
                "handle": member.name.handle,
                "display_name": member.display_name,
                "display_name_visible": visible(member.display_name),
                "read_seq": member.read_seq,
                "joined_at": timestamp(member.joined_at),
                "left_at": timestamp(member.left_at) if member.left_at else None,
                "muted": member.muted,
            }
        )
    events = Event.objects.filter(room=room)
    if since is not None:
        events = events.filter(created_at__gte=since)
    for event in _pages(with_event_relations(events), "seq", lambda e: e.seq):
        line = {"type": "event", "room": room.slug, **event_json(event)}
        if line["message"] is not None and line["message"]["hidden"]:
            line["message"]["body"] = event.message.body
            line["message"]["hidden_reason"] = event.message.hidden_reason
        yield _line(line)


def _threads_of(project: Project) -> QuerySet[Conversation]:
    """Threads that a name of ``project`` takes part in."""
    return Conversation.objects.filter(
        pk__in=Participant.objects.filter(name__workspace__project=project).values(
            "conversation_id"
        )
    ).order_by("pk")


def _thread_lines(threads: QuerySet[Conversation], since: datetime | None) -> Iterator[str]:
    participants = Prefetch(
        "participants",
        queryset=Participant.objects.select_related("name__workspace__project").order_by(
            "joined_at", "id"
        ),
    )
    for thread in _pages(threads.prefetch_related(participants), "pk", lambda c: c.pk):
        yield _line(
            {
                "type": "conversation",
                "id": thread.public_id,
                "cap": thread.cap,
                "notes_count": thread.notes_count,
                "exchanges_left": thread.exchanges_left,
                "locked": thread.locked_at is not None,
                "created_at": timestamp(thread.created_at),
                "last_note_at": timestamp(thread.last_note_at),
                "participants": [
                    {
                        "name": p.name.handle,
                        "workspace": p.name.workspace.slug,
                        "project": p.name.workspace.project.slug,
                    }
                    for p in thread.participants.all()
                ],
            }
        )
        notes = Note.objects.filter(conversation=thread).select_related(*_NOTE_RELATED)
        if since is not None:
            notes = notes.filter(created_at__gte=since)
        for note in _pages(notes, "position", lambda n: n.position):
            note.conversation = thread  # its exchanges_left as the thread shows it
            yield _line({"type": "note", **note_json(note)})


def _pages(queryset: QuerySet, key: str, key_of) -> Iterator[Any]:
    """Every row of ``queryset`` by ``key`` ascending, ``EXPORT_PAGE`` rows per query."""
    last = None
    while True:
        page = queryset.order_by(key)
        if last is not None:
            page = page.filter(**{f"{key}__gt": last})
        rows = list(page[:EXPORT_PAGE])
        yield from rows
        if len(rows) < EXPORT_PAGE:
            return
        last = key_of(rows[-1])
