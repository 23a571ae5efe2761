"""Every state change of the rooms app, split by concern; import from here.

- ``stream``: the stream core: the room row lock, the next event, the
  current member and the display-name check (used by the modules below).
- ``membership``: create, join and leave a room.
- ``sending``: post a message.
- ``reading``: read positions and reading events (waiting for them if asked).
- ``reviews``: review a message.
- ``people``: a person's post and review from the admin, joining first.
- ``moderation``: hide messages, mute and remove members, lock rooms; remove
  another project's members when an opt-in is revoked.
- ``waiting``: waiting for anything, a note or news in a joined room.
- ``flood``: the room that pauses itself past its flood limit, and resuming it.
- ``retention``: purging what is older than a project's ``retention_days``.
"""

from rooms.services.flood import room_paused_now, room_resume
from rooms.services.membership import Created, Joined, room_create, room_join, room_leave
from rooms.services.moderation import (
    OPTIN_REVOKED_REASON,
    member_mute,
    member_remove,
    member_unmute,
    members_remove_for_revoked_optin,
    message_hide,
    message_unhide,
    room_lock,
    room_unlock,
)
from rooms.services.people import person_message_send, person_review_add
from rooms.services.reading import EventsRead, events_read, read_advance, read_position_set
from rooms.services.retention import Purged, purge_run
from rooms.services.reviews import review_add
from rooms.services.sending import MessageSent, message_send
from rooms.services.waiting import Activity, activity_wait

__all__ = [
    "OPTIN_REVOKED_REASON",
    "Activity",
    "Created",
    "EventsRead",
    "Joined",
    "MessageSent",
    "Purged",
    "activity_wait",
    "events_read",
    "member_mute",
    "member_remove",
    "member_unmute",
    "members_remove_for_revoked_optin",
    "message_hide",
    "message_send",
    "message_unhide",
    "person_message_send",
    "person_review_add",
    "purge_run",
    "read_advance",
    "read_position_set",
    "review_add",
    "room_create",
    "room_join",
    "room_leave",
    "room_lock",
    "room_paused_now",
    "room_resume",
    "room_unlock",
]
