"""Who an MCP request acts as (SPEC §6): the MCP door's adapter of ``mailbox.callers``.

Three ways, checked in this order:

* ``Authorization: Bearer <session token>``: that session.
* ``Authorization: Bearer <project key>`` with ``Plumb-Workspace`` and
  ``Plumb-Name``: the connected session of that name, started implicitly
  when there is none. An MCP client configured with one URL and three
  headers so acts as one stable name across restarts.
* A project key without ``Plumb-Name``: a handshake-era ``initialize`` starts
  a session under a generated name and returns an ``Mcp-Session-Id`` of its
  own for it; later requests of that MCP session carry the id back, with the
  key. The id is no credential (clients and proxies log it): it never works
  as a bearer, and a token never works as an id.

This module reads the headers; ``mailbox.callers`` checks the credential and
decides, as it does for REST, so a refusal names the same reason.
"""

from __future__ import annotations

from django.http import HttpRequest

from mailbox import callers

SESSION_ID_HEADER = "Mcp-Session-Id"

Caller = callers.Caller


def _header(request: HttpRequest, name: str) -> str | None:
    value = request.headers.get(name)
    return value.strip() if value and value.strip() else None


def authenticate(request: HttpRequest, *, use_session_id: bool) -> Caller:
    """Check the request's credential; raises DRF authentication errors (401).

    ``use_session_id``: whether an ``Mcp-Session-Id`` counts (handshake-era
    requests after ``initialize``; never on ``initialize`` itself nor in the
    stateless era, which has no MCP sessions).
    """
    workspace = _header(request, callers.WORKSPACE_HEADER)
    name = _header(request, callers.NAME_HEADER)
    mcp_session_id = _header(request, SESSION_ID_HEADER) if use_session_id else None
    return callers.caller_identify(
        request, workspace=workspace, name=name, mcp_session_id=mcp_session_id
    )
