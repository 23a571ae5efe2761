"""Waiting for anything: a note for the session, or news in one of its rooms (SPEC §3.3).

It lives in ``rooms`` because it reads both halves of plumb, and only
``rooms`` may import ``mailbox``. The waiting itself is ``mailbox/wakeups.py``'s
one rule; this module only says what counts as activity.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mailbox import wakeups
from mailbox.models import Note, Session
from mailbox.services import notes_claim
from rooms.models import Member
from rooms.selectors import joined_room_ids, unread_rooms_for_session
from rooms.services.stream import room_topic


@dataclass
class Activity:
    notes: list[Note] = field(default_factory=list)
    # Memberships with their room and ``unseen`` (rooms.selectors.unread_rooms_for_session).
    rooms: list[Member] = field(default_factory=list)


def activity_wait(session: Session, *, wait: float = 0) -> Activity:
    """The session's pending notes, delivered, and its rooms with news, listed.

    A room has news when a message or review by someone else sits above the
    caller's read position; listing it reads nothing and moves no read
    position. With ``wait`` (seconds), holds until there is either, under the
    one waiting rule of ``mailbox/wakeups.py``: woken by the commit of a note
    for the session or an event of a room it belongs to (joined when the
    call started), from any process or host, no transaction held; a newer waiting call of the
    session (notes, room or activity) makes this one answer with nothing.
    Timed out, the answer is empty. Notes are claimed as ``check_messages``
    claims them: each is delivered to exactly one response.
    """

    def check() -> Activity | None:
        # Rooms first: should that query fail, no note has been claimed for a
        # response that will not be sent.
        rooms = unread_rooms_for_session(session)
        notes = notes_claim(session)
        return Activity(notes=notes, rooms=rooms) if notes or rooms else None

    topics = wakeups.session_topics(session)
    if wait > 0:
        topics += [room_topic(room_id) for room_id in joined_room_ids(session)]
    return wakeups.wait_for(session, check, seconds=wait, idle=Activity, topics=topics)
