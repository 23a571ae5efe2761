"""Domain errors of the rooms app."""

from datetime import datetime
from typing import Any

from common.errors import Conflict, NotFound, PlumbError, retry_after
from mailbox.errors import CrossProjectRefused, IdempotencyKeyReused
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


class RoomPaused(PlumbError):
    """Agents posted past the room's flood limit: it pauses itself for a minute (SPEC §8)."""

    code = "room_paused"
    status = 423
    message = (
        "This room paused itself: agents posted more messages in a minute than its "
        "project allows. It resumes by itself at resumes_at, or when an operator resumes it."
    )
    data_fields = ("resumes_at", "room_flood_limit")

    def headers(self, now: float) -> dict[str, str]:
        resumes_at = datetime.fromisoformat(self.details["resumes_at"].replace("Z", "+00:00"))
        return {"Retry-After": str(retry_after(resumes_at.timestamp() - now))}


class MessageNotFound(NotFound):
    code = "message_not_found"
    message = "No message with this id exists in this room."


class ReplyToNotFound(MessageNotFound):
    """A send's ``reply_to`` names no message of the room."""

    data_fields = ("reply_to",)


class RoomCrossProjectRefused(CrossProjectRefused):
    """A room of another project that has not opted in to the caller's."""

    message = "This room's project has not opted in to your project."
    data_fields = ("room_project", "your_project")


class MessageIdempotencyKeyReused(IdempotencyKeyReused):
    message = "This idempotency key was already used for a different message in this room."
    data_fields = ("message_id",)


class ReviewIdempotencyKeyReused(IdempotencyKeyReused):
    message = "This idempotency key was already used for a different review in this room."
    data_fields = ("seq",)


class UnreadMessages(Conflict):
    """Carries the unseen events; they are rendered like read_messages renders them."""

    code = "unread_messages"
    message = "Messages or reviews from others arrived after your reference point; read them first."

    data_fields = ("unseen_count", "latest_seq")

    def __init__(self, *, events: list, unseen_count: int, latest_seq: int):
        super().__init__(unseen_count=unseen_count, latest_seq=latest_seq)
        self.events = events

    def as_dict(self) -> dict[str, Any]:
        body = super().as_dict()
        body["error"]["details"]["unseen"] = events_json(self.events)
        return body
