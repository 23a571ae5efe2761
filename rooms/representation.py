"""How a room's objects look to agents: the JSON of events, messages and rooms.

REST views, MCP tools and errors (``unread_messages`` lists the unseen
events) all build their JSON here, so an event reads the same whichever door
it leaves by. ``rooms.api.serializers`` declares the same fields for the
OpenAPI schema and returns these dicts.
"""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from common.limits import SYSTEM_NAME
from common.search.snippets import snippet
from common.text import visible
from mailbox.representation import notes_json, timestamp
from rooms.models import Event, Message

# --- representations -------------------------------------------------------------
# Messages and events are built as plain dicts: DRF's per-field machinery (and a
# nested serializer per event) cost most of a page read. The serializers below
# declare the same fields for the OpenAPI schema and return these dicts;
# tests/rooms/test_representation.py holds the two to the same keys and values.


def person_json(handle: str, display_name: str) -> dict:
    return {
        "handle": handle,
        "display_name": display_name,
        "display_name_visible": visible(display_name),
    }


def author_json(handle: str, display_name: str, kind: str) -> dict:
    """A message's author or an event's actor, and what kind of writer: ``agent``, or
    ``human`` for a person posting from the admin. A moderation by an operator has
    no actor."""
    return {**person_json(handle, display_name), "kind": kind}


def message_json(message: Message) -> dict:
    hidden = message.hidden
    return {
        "id": message.public_id,
        "seq": message.seq,
        "room": message.room.slug,
        "author": author_json(
            message.author.handle, message.author_display_name, message.author.kind
        ),
        "body": None if hidden else message.body,
        "reply_to": message.reply_to.public_id if message.reply_to_id else None,
        # Recomputed from handle and display name, as PersonSerializer does.
        "mentions": [person_json(m["handle"], m["display_name"]) for m in message.mentions],
        "created_at": timestamp(message.created_at),
        "hidden": hidden,
    }


def review_json(event: Event) -> dict:
    return {
        "message_id": event.message.public_id,
        "verdict": event.verdict,
        "body": event.body or None,
    }


def moderation_json(event: Event) -> dict:
    return {
        "action": event.data.get("action", ""),
        "reason": event.data.get("reason", ""),
        "message_id": event.message.public_id if event.message_id else None,
        "member": event.data.get("member"),
    }


def events_json(events) -> list[dict]:
    return [event_json(event) for event in events]


def event_json(event: Event) -> dict:
    kind = event.kind
    return {
        "seq": event.seq,
        "kind": kind,
        "created_at": timestamp(event.created_at),
        "actor": (
            author_json(event.actor.handle, event.actor_display_name, event.actor.kind)
            if event.actor_id is not None
            else None
        ),
        "message": message_json(event.message) if kind == Event.Kind.MESSAGE else None,
        "review": review_json(event) if kind == Event.Kind.REVIEW else None,
        "moderation": moderation_json(event) if kind == Event.Kind.MODERATION else None,
    }


class RoomSerializer(serializers.Serializer):
    slug = serializers.CharField()
    project = serializers.CharField(source="project.slug")
    title = serializers.CharField()
    topic = serializers.CharField()
    locked = serializers.BooleanField()
    latest_seq = serializers.IntegerField(source="head_seq")
    created_at = serializers.DateTimeField()
    member = serializers.SerializerMethodField(help_text="Whether you are a current member.")
    read_seq = serializers.SerializerMethodField(help_text="Your read position (members).")
    unseen = serializers.SerializerMethodField(
        help_text="Messages from others above your read position (members)."
    )

    def get_member(self, room) -> bool:
        return getattr(room, "my_read_seq", None) is not None

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_read_seq(self, room) -> int | None:
        return getattr(room, "my_read_seq", None)

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_unseen(self, room) -> int | None:
        if getattr(room, "my_read_seq", None) is None:
            return None
        return getattr(room, "my_unseen", None) or 0


# --- response bodies, shared by the REST views and the MCP tools ------------------


def room_event_body(room, event, *, scrubbed: list[dict] | None = None) -> dict:
    """A room and the event a call appended; ``scrubbed`` where the call stored texts."""
    body = {
        "room": room_json(room),
        "event": event_json(event) if event is not None else None,
        "latest_seq": room.head_seq,
    }
    if scrubbed is not None:
        body["scrubbed"] = scrubbed
    return body


def room_json(room) -> dict:
    return RoomSerializer(room).data


def room_list_body(rooms, has_more: bool) -> dict:
    return {"rooms": RoomSerializer(rooms, many=True).data, "has_more": has_more}


def message_sent_body(sent) -> dict:
    return {
        "message": message_json(sent.message),
        "latest_seq": sent.latest_seq,
        "unseen_before_send": sent.unseen_before_send,
        "mentions": sent.mentions,
        "unresolved_mentions": sent.unresolved_mentions,
        "mention_warnings": sent.mention_warnings,
        "scrubbed": sent.scrubbed,
        "replayed": sent.replayed,
    }


def message_receipts_body(message, read_by: list[str], unread_by: list[str]) -> dict:
    return {"message": message_json(message), "read_by": read_by, "unread_by": unread_by}


def events_read_body(read) -> dict:
    body = {
        "events": events_json(read.events),
        "latest_seq": read.latest_seq,
        "read_seq": read.read_seq,
        "has_more": read.has_more,
    }
    if read.history_starts_at is not None:
        # The read started below the first event the purge kept (SPEC §4.3).
        body["history_starts_at"] = read.history_starts_at
    return body


def review_body(room, event) -> dict:
    return {"event": event_json(event), "latest_seq": room.head_seq}


def read_position_body(room, member) -> dict:
    return {"read_seq": member.read_seq, "latest_seq": room.head_seq}


def activity_body(activity) -> dict:
    """``wait_for_activity``: the notes it delivered and the rooms with news, listed."""
    return {
        "notes": notes_json(activity.notes) if activity.notes else [],
        "rooms": [
            {
                "slug": member.room.slug,
                "latest_seq": member.room.head_seq,
                "read_seq": member.read_seq,
                "unseen": member.unseen,
            }
            for member in activity.rooms
        ],
    }


# --- search (SPEC §9) -----------------------------------------------------------------


def author_of_hit(hit) -> dict:
    """Who wrote a search hit, as notes' ``from`` says it: a person and plumb itself
    have no workspace or project to show (SPEC §1)."""
    if hit.author_kind == "system":
        return {"name": SYSTEM_NAME, "workspace": None, "project": None, "kind": "system"}
    if hit.author_kind == "human":
        return {"name": hit.name, "workspace": None, "project": None, "kind": "human"}
    return {
        "name": hit.name,
        "workspace": hit.workspace,
        "project": hit.project,
        "kind": hit.author_kind,
    }


def search_result_json(hit, query) -> dict:
    """A message or a note found by a search, with its snippet (``**`` around matches)."""
    result: dict = {"kind": hit.kind, "id": hit.public_id}
    if hit.kind == "message":
        result["room"] = hit.room
        result["seq"] = hit.seq
    else:
        result["conversation_id"] = hit.conversation_id
    result["from"] = author_of_hit(hit)
    result["created_at"] = timestamp(hit.created_at)
    result["snippet"] = snippet(hit.body, query)
    return result


def search_body(page) -> dict:
    return {
        "results": [search_result_json(hit, page.query) for hit in page.hits],
        "has_more": page.has_more,
        "cursor": page.cursor,
    }
