"""Who an MCP request acts as (SPEC §6).

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

Credentials are checked by the REST API's own authentication classes, so a
refusal names the same reason (``invalid_token``, ``key_revoked``,
``session_expired``...).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import SimpleNamespace

from django.http import HttpRequest
from rest_framework import exceptions
from rest_framework.throttling import SimpleRateThrottle

from common.errors import PlumbError, ValidationFailed
from common.prepared import Prepared, concrete_attnames, instances_from_row
from common.schema import NAME_HEADER, WORKSPACE_HEADER
from mailbox import credentials
from mailbox.api.auth import (
    ProjectKeyAuthentication,
    SessionTokenAuthentication,
    bearer_credential,
    project_key_check,
    session_check_live,
    session_for_mcp_session_id,
)
from mailbox.errors import NameInUse
from mailbox.models import AgentName, Project, ProjectKey, Session, Workspace
from mailbox.services import (
    OpenedMcpSession,
    StartedSession,
    handle_check,
    mcp_session_open,
    session_start,
    session_touch,
)
from mailbox.services.delivery import pending_exists
from mailbox.throttles import ProjectKeyRateThrottle, SessionRateThrottle
from plumb_site.mcp.schemas import HANDLE, SLUG

SESSION_ID_HEADER = "Mcp-Session-Id"


class SessionIdUnknown(PlumbError):
    """An ``Mcp-Session-Id`` that names no live session: answered with HTTP 404,
    which tells a handshake-era client to initialize again."""

    status = 404

    def __init__(self, reason: exceptions.APIException):
        super().__init__(str(reason.detail))
        self.code = getattr(reason.detail, "code", None) or "invalid_token"


@dataclass
class Caller:
    """The checked credential of one request, and the names it asks to act as."""

    key: ProjectKey | None = None
    session: Session | None = None  # known from a token, without starting anything
    workspace: str | None = None  # Plumb-Workspace
    name: str | None = None  # Plumb-Name
    # The open session of that name, found with the key (None: there is none
    # or it has expired); meaningful once ``named_looked_up`` is set.
    named: Session | None = None
    named_looked_up: bool = False


def _header(request: HttpRequest, name: str) -> str | None:
    value = request.headers.get(name)
    return value.strip() if value and value.strip() else None


def authenticate(request: HttpRequest, *, use_session_id: bool) -> Caller:
    """Check the request's credential; raises DRF authentication errors (401).

    ``use_session_id``: whether an ``Mcp-Session-Id`` counts (handshake-era
    requests after ``initialize``; never on ``initialize`` itself nor in the
    stateless era, which has no MCP sessions).
    """
    parsed = bearer_credential(request)
    if parsed is None:
        raise exceptions.NotAuthenticated()
    if parsed.kind == credentials.SESSION_TOKEN:
        session, _ = SessionTokenAuthentication().authenticate(request)
        return Caller(session=session)
    workspace, name = _header(request, WORKSPACE_HEADER), _header(request, NAME_HEADER)
    if workspace is not None and name is not None:
        return _with_named_session(request, parsed, workspace, name)
    key, _ = ProjectKeyAuthentication().authenticate(request)
    caller = Caller(key=key, workspace=workspace, name=name)
    session_id = _header(request, SESSION_ID_HEADER)
    if use_session_id and caller.name is None and session_id is not None:
        caller.session = _session_from_id(session_id, key)
    return caller


_NAMED_MODELS = (Session, AgentName, Workspace, Project, ProjectKey)
_named_session = Prepared(
    lambda prefix, workspace, name: (
        Session.objects.filter(
            ended_at__isnull=True,  # at most one such row per name (session_one_open_per_name)
            name__handle=name,
            workspace__slug=workspace,
            workspace__project__keys__prefix=prefix,
        )
        .annotate(notes_maybe_pending=pending_exists())
        .order_by()
        .values_list(
            *concrete_attnames(Session),
            *(f"name__{f}" for f in concrete_attnames(AgentName)),
            *(f"workspace__{f}" for f in concrete_attnames(Workspace)),
            *(f"workspace__project__{f}" for f in concrete_attnames(Project)),
            *(f"workspace__project__keys__{f}" for f in concrete_attnames(ProjectKey)),
            "notes_maybe_pending",
        )
    ),
    params=["prefix", "workspace", "name"],
)


def _with_named_session(
    request: HttpRequest, parsed: credentials.ParsedCredential, workspace: str, name: str
) -> Caller:
    """The key and the open session its headers name, found in one query.

    This is how the README's MCP configuration calls plumb, on every tool
    call: the key's row comes with the session's (when there is one), and
    with whether notes wait for it, as a session token's does in REST. The
    key is checked first, as alone; headers that name no open session leave
    ``named`` None, and the key is then looked up on its own.
    """
    caller = Caller(workspace=workspace, name=name, named_looked_up=True)
    rows = _named_session.rows(prefix=parsed.prefix, workspace=workspace, name=name)
    if not rows:
        caller.key, _ = ProjectKeyAuthentication().authenticate(request)
        return caller
    session, agent_name, found_workspace, project, key = instances_from_row(rows[0], *_NAMED_MODELS)
    project_key_check(request, parsed, key)
    key.project = found_workspace.project = project
    session.name, session.workspace = agent_name, found_workspace
    session.notes_maybe_pending = bool(rows[0][-1])
    caller.key = key
    # An open session past its time is no longer connected: the next start replaces it.
    caller.named = session if session.is_connected() else None
    return caller


def _session_from_id(session_id: str, key: ProjectKey) -> Session:
    # The id maps to its session in the database (mailbox.McpSession), so any
    # server process can answer, across restarts; ending the session ends it.
    session = session_for_mcp_session_id(session_id, project=key.project)
    try:
        if session is None:
            raise exceptions.AuthenticationFailed("Unknown session id.", code="invalid_token")
        session_check_live(session)
    except exceptions.AuthenticationFailed as refusal:
        raise SessionIdUnknown(refusal) from None
    return session


def check_session_rate(session: Session) -> None:
    """The REST per-session rate limit, for a tool call acting as ``session``."""
    _throttle(SessionRateThrottle(), session)


def _throttle(throttle: SimpleRateThrottle, credential: Session | ProjectKey) -> None:
    if not throttle.allow_request(SimpleNamespace(auth=credential), None):
        raise exceptions.Throttled(wait=throttle.wait())


def acting_session(caller: Caller) -> tuple[Session, StartedSession | None]:
    """The session a tool call acts as, and the start record if it began just now.

    Raises ``validation_error`` when a project key names no session, and the
    errors of ``session_start`` (``workspace_not_found``, ``name_taken``...).
    """
    if caller.session is not None:
        return caller.session, None
    if caller.name is None:
        raise ValidationFailed(
            f"With a project key, send {NAME_HEADER} (and {WORKSPACE_HEADER}) to name the "
            "session to act as, or use a session token.",
            details={NAME_HEADER: ["Required with a project key."]},
        )
    return session_for_name(
        caller.key,
        workspace=caller.workspace,
        name=caller.name,
        found=(caller.named,) if caller.named_looked_up else None,
    )


def session_for_name(
    key: ProjectKey,
    *,
    workspace: str | None,
    name: str,
    found: tuple[Session | None] | None = None,
) -> tuple[Session, StartedSession | None]:
    """The connected session of ``name`` in ``workspace``, started when there is none.

    ``found``: ``(session or None,)`` when authentication has made that look-up
    already (``Caller.named``), so it is not made twice.
    A start delivers nothing by itself: the pending notes ride on the result
    of the call that needed the session, as they do on REST's session start.
    """
    workspace = _checked(workspace, WORKSPACE_HEADER, SLUG)
    # Before the look-up: a reserved name is refused, not merely never found.
    name = handle_check(_checked(name, NAME_HEADER, HANDLE), field=NAME_HEADER)
    session = found[0] if found is not None else _connected_session(key, workspace, name)
    if session is not None:
        session_touch(session)
        return session, None
    _throttle(ProjectKeyRateThrottle(), key)
    try:
        started = session_start(key, workspace_slug=workspace, name=name)
    except NameInUse:
        # Another request for the same name (a parallel tool call of this very
        # client, or another server process) started it between our look-up
        # and our start: act as that session.
        session = _connected_session(key, workspace, name)
        if session is None:
            raise
        session_touch(session)
        return session, None
    return started.session, started


def start_generated(caller: Caller) -> OpenedMcpSession:
    """A session under a generated name and its MCP session id, for a handshake-era
    initialize without a name."""
    workspace = _checked(caller.workspace, WORKSPACE_HEADER, SLUG)
    _throttle(ProjectKeyRateThrottle(), caller.key)
    return mcp_session_open(caller.key, workspace_slug=workspace)


def _connected_session(key: ProjectKey, workspace: str, name: str) -> Session | None:
    return (
        Session.objects.connected()
        .select_related("name", "workspace__project")
        .filter(
            name__handle=name,
            workspace__slug=workspace,
            workspace__project_id=key.project_id,
        )
        .first()
    )


def _checked(value: str | None, header: str, pattern: str) -> str:
    if value is None:
        raise ValidationFailed(
            f"Send the {header} header.", details={header: ["Required with a project key."]}
        )
    if re.fullmatch(pattern.removeprefix("^").removesuffix("$"), value) is None:
        raise ValidationFailed(
            f"{header} is malformed.",
            details={header: ["Use a lower-case slug or name as the operator gave it."]},
        )
    return value
