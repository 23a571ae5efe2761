"""Every state change of the mailbox app, split by entity; import from here."""

from mailbox.services.identity import (
    IssuedKey,
    StartedSession,
    key_create,
    key_find,
    key_revoke,
    key_touch,
    optin_grant,
    optin_revoke,
    project_create,
    project_get,
    project_update,
    session_end,
    session_start,
    session_touch,
    workspace_create,
)
from mailbox.services.notes import NoteLeft, note_leave, notes_claim

__all__ = [
    "IssuedKey",
    "NoteLeft",
    "StartedSession",
    "key_create",
    "key_find",
    "key_revoke",
    "key_touch",
    "note_leave",
    "notes_claim",
    "optin_grant",
    "optin_revoke",
    "project_create",
    "project_get",
    "project_update",
    "session_end",
    "session_start",
    "session_touch",
    "workspace_create",
]
