"""The audit trail: every moderation, opt-in and key change leaves a record."""

from __future__ import annotations

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
        actor=(actor or "unknown")[:150],
        action=action,
        project=project,
        project_slug=project.slug if project is not None else "",
        room_slug=room_slug,
        target=target[:200],
        reason=reason,
    )
