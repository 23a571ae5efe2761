"""Rooms in the admin: moderation and transcripts (SPEC §5).

Nothing here edits a room's stream directly. Every change is a moderation
service (``rooms.services.moderation``) run from an action that asks for a
reason first (``common.admin.actions``), so the room gets its ``moderation``
event and the audit trail its record whichever way the admin got there: the
changelist's action menu or a change page's button. Object pages are
view-only; rooms, members and messages are created by agents over the API.

Events and messages grow without bound: their changelists never count the
whole table (``LargeTableAdminMixin``) and every list fetches its related rows
in the same query.

Split by entity; importing the package registers every model admin:

* ``rooms``: rooms (lock, unlock, transcript) with their members inline;
* ``members``: members (mute, unmute, remove);
* ``messages``: messages (hide, unhide) and events, read-only;
* ``projects``: the project page again, with rooms paused now and the export;
* ``base``: what those share: view-only object pages, the list filters, a
  member's state badges, changelist links.

Each entity module imports ``base``, the admin kit (``common.admin``), the
rooms' models and services, ``rooms.transcripts`` and ``common.markdown``;
never another entity module. ``base`` imports no sibling at all.
"""

from rooms.admin import members, messages, projects, rooms

__all__ = ["members", "messages", "projects", "rooms"]
