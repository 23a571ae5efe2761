"""Every state change of the mailbox app, split by entity; import from here.

``audit`` (the trail and the one rule for reasons), ``identity`` (projects,
workspaces, opt-ins), ``keys``, ``sessions`` (and names), ``bootstrap``,
``mcp_sessions`` (the MCP door's session ids), ``people`` (people's
handles and the sessions the admin acts through), ``notes`` (leaving
notes, locking threads), ``delivery`` (claiming them, and waiting for one's
sent notes to be picked up) and ``bounces`` (those nobody picked up).
"""

from mailbox.services.audit import audit_record
from mailbox.services.bootstrap import Bootstrapped, site_bootstrap
from mailbox.services.bounces import notes_bounce
from mailbox.services.delivery import notes_claim, notes_sent_wait, notes_wait
from mailbox.services.identity import (
    optin_grant,
    optin_revoke,
    project_create,
    project_update,
    workspace_create,
)
from mailbox.services.keys import IssuedKey, key_create, key_revoke, key_touch
from mailbox.services.mcp_sessions import OpenedMcpSession, mcp_session_open
from mailbox.services.notes import NoteLeft, conversation_lock, conversation_unlock, note_leave
from mailbox.services.people import (
    check_person_handle,
    people_home,
    person_claim,
    person_mentions_seen,
)
from mailbox.services.sessions import (
    StartedSession,
    handle_check,
    name_reserve,
    names_free,
    session_end,
    session_start,
    session_touch,
)

__all__ = [
    "Bootstrapped",
    "IssuedKey",
    "NoteLeft",
    "OpenedMcpSession",
    "StartedSession",
    "audit_record",
    "check_person_handle",
    "conversation_lock",
    "conversation_unlock",
    "handle_check",
    "key_create",
    "key_revoke",
    "key_touch",
    "mcp_session_open",
    "name_reserve",
    "names_free",
    "note_leave",
    "notes_bounce",
    "notes_claim",
    "notes_sent_wait",
    "notes_wait",
    "optin_grant",
    "optin_revoke",
    "people_home",
    "person_claim",
    "person_mentions_seen",
    "project_create",
    "project_update",
    "session_end",
    "session_start",
    "session_touch",
    "site_bootstrap",
    "workspace_create",
]
