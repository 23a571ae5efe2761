"""MCP sessions: the ``Mcp-Session-Id`` a handshake-era client is given at ``initialize``.

A client that connects with a project key and no ``Plumb-Name`` gets a
session under a generated name, and an MCP session id that later requests
carry back to act as it. The id is a random id of its own (``McpSession``),
never the session's token: clients and proxies log it, and a logged id must
not open the REST API (SPEC §6).
"""

from __future__ import annotations

from dataclasses import dataclass

from mailbox.models import McpSession, ProjectKey, Session
from mailbox.services.sessions import session_start


@dataclass(frozen=True)
class OpenedMcpSession:
    session: Session
    mcp_session_id: str  # the Mcp-Session-Id header value; not a secret


def mcp_session_open(project_key: ProjectKey, *, workspace_slug: str) -> OpenedMcpSession:
    """Start a session under a generated name and give it a new MCP session id.

    Raises what ``session_start`` raises (``workspace_not_found``...). One
    transaction holds both rows, so no session is left that its client has
    no id for. The session's token is not returned: the client authenticates
    with its project key, and the id only selects the session. Nothing is
    delivered here; pending notes ride on the client's next successful call.
    """
    opened: list[McpSession] = []
    started = session_start(
        project_key,
        workspace_slug=workspace_slug,
        on_started=lambda session: opened.append(McpSession.objects.create(session=session)),
    )
    return OpenedMcpSession(session=started.session, mcp_session_id=opened[0].public_id)
