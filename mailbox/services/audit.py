"""The audit trail: every moderation, opt-in and key change leaves a record."""

from __future__ import annotations

from common import limits
from common.errors import ValidationFailed
from mailbox.models import AuditRecord, Project


def audit_record(
    *,
    actor: str,
    action: str,
    project: Project | None = None,
    room_slug: str = "",
    target: str = "",
    reason: str = "",
) -> AuditRecord:
    """Record an operator action; call it inside the action's own transaction,
    so that the record exists exactly when the change does."""
    return AuditRecord.objects.create(
        actor=(actor or "unknown")[: limits.ACTOR_MAX],
        action=action,
        project=project,
        project_slug=project.slug if project is not None else "",
        room_slug=room_slug,
        target=target[: limits.AUDIT_TARGET_MAX],
        reason=reason,
    )


def reason_check(reason: str | None, *, required: bool) -> str:
    """The one rule for an operator's reason, rooms and conversations alike.

    Stripped; required where the action needs one (the admin and the command
    line ask for it there too); at most ``limits.REASON_MAX`` characters, as
    the admin's form allows. Raises ``validation_error``.
    """
    reason = (reason or "").strip()
    if required and not reason:
        raise ValidationFailed.field(
            "reason",
            "Say why; the room and the audit trail show it.",
            "A reason is required for this moderation action.",
        )
    if len(reason) > limits.REASON_MAX:
        raise ValidationFailed.field(
            "reason",
            f"At most {limits.REASON_MAX} characters.",
            f"reason is at most {limits.REASON_MAX} characters.",
        )
    return reason
