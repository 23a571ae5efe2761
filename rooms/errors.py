"""Domain errors of the rooms app."""

from typing import Any

from common.errors import Conflict, NotFound, PlumbError
from rooms.representation import events_json


class RoomNotFound(NotFound):
    code = "room_not_found"
    message = "No room has this slug."


class RoomExists(Conflict):
    code = "room_exists"
    message = "A room with this slug already exists."


class NotAMember(PlumbError):
    code = "not_a_member"
    status = 403
    message = "You are not a member of this room; join it first."


class MemberMuted(PlumbError):
    code = "member_muted"
    status = 403
    message = "A moderator has muted you in this room."


class RoomLocked(PlumbError):
    code = "room_locked"
    status = 423
    message = "A moderator has locked this room."


class MessageNotFound(NotFound):
    code = "message_not_found"
    message = "No message with this id exists in this room."


class UnreadMessages(Conflict):
    """Carries the unseen events; they are rendered like read_messages renders them."""

    code = "unread_messages"
    message = "Messages or reviews from others arrived after your reference point; read them first."

    def __init__(self, *, events: list, unseen_count: int, latest_seq: int):
        super().__init__(details={"unseen_count": unseen_count, "latest_seq": latest_seq})
        self.events = events

    def as_dict(self) -> dict[str, Any]:
        body = super().as_dict()
        body["error"]["details"]["unseen"] = events_json(self.events)
        return body
