"""Domain errors of the mailbox app: identity, sessions and notes."""

from datetime import datetime

from rest_framework import exceptions

from common.errors import Conflict, NotFound, PlumbError, ValidationFailed, retry_after
from mailbox.models import Session


def session_ended_refusal(end_reason: str) -> exceptions.AuthenticationFailed:
    """How a call of an ended session is refused (401), naming why it ended.

    The one answer for a new call with its token and for a call that was
    waiting when the session ended (``mailbox.wakeups``).
    """
    if end_reason == Session.EndReason.KEY_REVOKED:
        return exceptions.AuthenticationFailed(
            "The project key that started this session has been revoked.", code="key_revoked"
        )
    return exceptions.AuthenticationFailed(
        "This session has ended; start a new one.", code="session_ended"
    )


class WorkspaceNotFound(NotFound):
    code = "workspace_not_found"
    message = "No workspace with this slug exists in the key's project."


class ProjectNotFound(NotFound):
    code = "project_not_found"
    message = "No project with this slug exists."


class KeyNotFound(NotFound):
    code = "key_not_found"
    message = "No project key matches."


class OptInNotFound(NotFound):
    code = "optin_not_found"
    message = "No such opt-in exists."


class NameNotFound(NotFound):
    """An operator named an agent that never connected (the ``plumb`` command)."""

    code = "name_not_found"
    message = "No agent has this name."


class NameInUse(Conflict):
    code = "name_in_use"
    message = "Another connected session holds this name."


class NameTaken(Conflict):
    code = "name_taken"
    message = "This name is bound to another workspace."


class AlreadyExists(Conflict):
    code = "already_exists"
    message = "This already exists."


class InvalidName(ValidationFailed):
    """A malformed handle, reported like any other field error."""


class McpSessionIdUnknown(PlumbError):
    """An ``Mcp-Session-Id`` that names no live session: answered with HTTP 404,
    which tells a handshake-era client to initialize again. The code says why,
    as it would for a token (``invalid_token``, ``session_ended``...)."""

    status = 404

    def __init__(self, message: str, *, code: str):
        super().__init__(message)
        self.code = code


class KeyRevoked(PlumbError):
    code = "key_revoked"
    status = 401
    message = "This project key has been revoked."


class RecipientNotFound(NotFound):
    code = "recipient_not_found"
    message = "No agent has this name."
    data_fields = ("to",)


class ConversationNotFound(NotFound):
    code = "conversation_not_found"
    message = "No conversation has this id."


class NoteNotFound(NotFound):
    code = "note_not_found"
    message = "No note of yours has this id."


class NotAParticipant(PlumbError):
    code = "not_a_participant"
    status = 403
    message = "You are not a participant of this conversation."


class MailboxDisabled(PlumbError):
    code = "mailbox_disabled"
    status = 403
    message = "The mailbox is turned off for this project."


class CrossProjectRefused(PlumbError):
    code = "cross_project_refused"
    status = 403
    message = "The recipient's project has not opted in to notes from your project."
    data_fields = ("recipient_project", "your_project")


class RecipientAmbiguous(PlumbError):
    code = "recipient_ambiguous"
    status = 400
    message = "Name a recipient with 'to': this thread has no single other participant."
    data_fields = ("participants_other_than_you",)


class ConversationExhausted(Conflict):
    code = "conversation_exhausted"
    message = "This conversation has used up its exchanges; start a new one."
    data_fields = ("cap", "conversation_id")


class ConversationLocked(Conflict):
    code = "conversation_locked"
    message = "This conversation was locked by an operator."


class IdempotencyKeyReused(Conflict):
    code = "idempotency_key_reused"
    message = "This idempotency key was already used for a different note."
    data_fields = ("note_id", "conversation_id")


class BudgetExhausted(PlumbError):
    """A project's daily budget of notes, or of messages and reviews, is spent (SPEC §8).

    ``resets_at`` is the next midnight UTC, when the budget is whole again;
    ``Retry-After`` says the same in seconds.
    """

    code = "budget_exhausted"
    status = 429
    message = "Your project's daily budget is spent; it resets at midnight UTC."
    data_fields = ("budget", "used", "resets_at")

    def headers(self, now: float) -> dict[str, str]:
        return {"Retry-After": str(retry_after(self.resets_at.timestamp() - now))}

    @property
    def resets_at(self):
        return datetime.fromisoformat(self.details["resets_at"].replace("Z", "+00:00"))


class TooManySessions(PlumbError):
    """The project already has ``max_connected_sessions`` sessions connected (SPEC §8)."""

    code = "too_many_sessions"
    status = 429
    message = (
        "Your project has as many connected sessions as its operator allows; end one, "
        "or wait for an idle one to expire."
    )
    data_fields = ("max_connected_sessions", "connected")
