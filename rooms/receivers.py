"""How rooms react to what the mailbox floor announces (``mailbox.signals``).

Connected in ``RoomsConfig.ready()``. A receiver only hands the announcement
to a rooms service; the rule lives in the service, as for any front door.
"""

from __future__ import annotations

from typing import Any

from mailbox.models import Project
from rooms.services.moderation import members_remove_for_revoked_optin


def on_optin_revoked(
    sender: type, *, project: Project, source: Project | None, actor: str, **kwargs: Any
) -> None:
    """``project`` stopped accepting ``source`` (``None``: every project it has no
    opt-in for): their agents leave ``project``'s rooms."""
    members_remove_for_revoked_optin(project, source=source, actor=actor)
