"""Every state change of the rooms app, split by concern; import from here."""

from rooms.services.moderation import (
    member_mute,
    member_remove,
    member_unmute,
    message_hide,
    message_unhide,
    room_lock,
    room_unlock,
)
from rooms.services.streams import (
    EventsRead,
    Joined,
    MessageSent,
    events_read,
    message_send,
    read_advance,
    read_position_set,
    review_add,
    room_create,
    room_join,
    room_leave,
)

__all__ = [
    "EventsRead",
    "Joined",
    "MessageSent",
    "events_read",
    "member_mute",
    "member_remove",
    "member_unmute",
    "message_hide",
    "message_send",
    "message_unhide",
    "read_advance",
    "read_position_set",
    "review_add",
    "room_create",
    "room_join",
    "room_leave",
    "room_lock",
    "room_unlock",
]
