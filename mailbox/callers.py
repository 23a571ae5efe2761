"""Who is calling: one credential, read and checked once, for every door.

REST's authentication classes (``mailbox.api.auth``) and the MCP door
(``plumb_site.mcp.identity``) are adapters of this module: they hand it the
request and what their protocol names (MCP's ``Plumb-Workspace``,
``Plumb-Name`` and ``Mcp-Session-Id`` headers), and it answers with the
session or key the call acts as, or refuses. So a refusal names the same
reason at both doors (``invalid_token``, ``key_revoked``, ``session_ended``,
``session_expired``...), and a client knows whether to retry, start a new
session, or ask its operator for a key.

A project key may only start sessions; every other call takes a session
token. An MCP client may also act as a name with a key (SPEC §6): ``check_``
functions here decide (may this caller resume that name, and as which
session?), ``caller_session`` acts on the decision (resumes or starts it).

A credential that matches nothing (``invalid_token``) counts against the
client's address (``PLUMB_RATE_AUTH_FAIL``, ``throttles.AuthFailureThrottle``);
past the rate every credential from that address is refused with ``429
throttled`` before it is looked up. The count is read once per call, in
``credential_read``. Revoked, ended and expired credentials do not count:
only the real secret reaches them, so they are no guess, and a revocation or
a lapse that hits many agents behind one address (all of them on 127.0.0.1
under ``make serve``) must not lock the others out. Neither does a
credential of the wrong kind (it is not looked up), nor a request with none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.http import HttpRequest
from django.utils import timezone
from rest_framework import exceptions

from common import limits
from common.errors import ValidationFailed
from mailbox import credentials, selectors
from mailbox.errors import McpSessionIdUnknown, NameInUse, session_ended_refusal
from mailbox.models import ProjectKey, Session
from mailbox.services import (
    OpenedMcpSession,
    StartedSession,
    handle_check,
    key_touch,
    mcp_session_open,
    session_start,
    session_touch,
)
from mailbox.throttles import AuthFailureThrottle, ProjectKeyRateThrottle, SessionRateThrottle

REALM = 'Bearer realm="plumb"'
# The names a key's caller acts as (SPEC §6): read by the MCP door, printed
# into client configurations by ``plumb connect``.
WORKSPACE_HEADER = "Plumb-Workspace"
NAME_HEADER = "Plumb-Name"


def _refusal(code: str, message: str) -> exceptions.AuthenticationFailed:
    return exceptions.AuthenticationFailed(message, code=code)


def _unknown(request: HttpRequest, message: str) -> exceptions.AuthenticationFailed:
    """``invalid_token`` for a credential that matches nothing, counted against the address."""
    AuthFailureThrottle().record(request)
    return _refusal("invalid_token", message)


def credential_read(request: HttpRequest) -> credentials.ParsedCredential | None:
    """The parsed bearer credential, ``None`` when no Authorization header was sent.

    Raises ``Throttled`` first when the client's address has sent too many
    credentials that matched nothing: nothing it sends is looked up then.
    Each call reads its credential here once, so the count is read once.
    """
    header = request.META.get("HTTP_AUTHORIZATION", "")
    if not header:
        return None
    AuthFailureThrottle().check(request)
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise _unknown(request, "Use 'Authorization: Bearer <token>'.")
    parsed = credentials.parse(value.strip())
    if parsed is None:
        raise _unknown(request, "The bearer token is not a plumb credential.")
    return parsed


def check_session_live(session: Session) -> None:
    """Refuse an ended or expired session, naming which; else record that it was seen.

    One rule for every way a request names its session (a token, an MCP
    session id), so both refuse alike.
    """
    if session.ended_at is not None:
        # The reason is a column of the row already read: still one query.
        raise session_ended_refusal(session.end_reason)
    now = timezone.now()
    if not session.is_connected(now):
        raise _refusal("session_expired", "This session expired after inactivity; start a new one.")
    session_touch(session, now=now)


def check_key(
    request: HttpRequest, parsed: credentials.ParsedCredential, key: ProjectKey | None
) -> ProjectKey:
    """Refuse a key that matches nothing or is revoked, naming which; else record its use.

    ``key`` is the row of ``parsed.prefix``, or None, however it was read
    (alone, or with the session an MCP client names).
    """
    if key is None or not credentials.matches(parsed.raw, key.key_hash):
        raise _unknown(request, "The project key is not known.")
    if key.revoked_at is not None:
        raise _refusal("key_revoked", "This project key has been revoked.")
    key_touch(key)
    return key


def _session_checked(
    request: HttpRequest, parsed: credentials.ParsedCredential, session: Session | None
) -> Session:
    """The live session of a token, ``session`` being the row of its prefix, or None."""
    if session is None:
        freed = selectors.freed_token_for_prefix(parsed.prefix)
        if freed is not None and credentials.matches(parsed.raw, freed.token_hash):
            # It existed: its session ended and its name was freed. No guess.
            raise session_ended_refusal(Session.EndReason.ENDED)
    if session is None or not credentials.matches(parsed.raw, session.token_hash):
        raise _unknown(request, "The session token is not known.")
    check_session_live(session)
    return session


# --- REST: one credential of a known kind ---------------------------------------------


def session_authenticate(request: HttpRequest) -> Session | None:
    """The live session whose token the request carries; None without a credential."""
    parsed = credential_read(request)
    if parsed is None:
        return None
    if parsed.kind != credentials.SESSION_TOKEN:
        raise _refusal(
            "session_token_required",
            "This call needs a session token; a project key only starts sessions.",
        )
    return _session_checked(request, parsed, selectors.session_for_token_prefix(parsed.prefix))


def key_authenticate(request: HttpRequest) -> ProjectKey | None:
    """The active project key the request carries; None without a credential."""
    parsed = credential_read(request)
    if parsed is None:
        return None
    if parsed.kind != credentials.PROJECT_KEY:
        raise _refusal("project_key_required", "Starting a session needs a project key.")
    return check_key(request, parsed, selectors.key_for_prefix(parsed.prefix))


def rate_check(credential: Session | ProjectKey) -> None:
    """The REST rate limit of a session or key, for a door without DRF's throttling."""
    throttle = (
        SessionRateThrottle() if isinstance(credential, Session) else ProjectKeyRateThrottle()
    )
    if not throttle.allow_credential(credential):
        raise exceptions.Throttled(wait=throttle.wait())


# --- MCP: a token, or a key acting as a name or as an MCP session --------------------


@dataclass
class Caller:
    """The checked credential of one request, and the names it asks to act as."""

    key: ProjectKey | None = None
    session: Session | None = None  # known from a token or an MCP session id
    workspace: str | None = None  # Plumb-Workspace
    name: str | None = None  # Plumb-Name
    # The open session of that name, found with the key (None: there is none
    # or it has expired); meaningful once ``named_looked_up`` is set.
    named: Session | None = None
    named_looked_up: bool = False


def caller_identify(
    request: HttpRequest,
    *,
    workspace: str | None,
    name: str | None,
    mcp_session_id: str | None,
) -> Caller:
    """Check the request's credential and what it names; raises DRF's 401s.

    A session token acts as its session, whatever else is sent. A key with
    both names comes with the open session of that name, looked up in the
    same query. ``mcp_session_id``, when the door counts one, selects a
    session of the key's project (the ``Mcp-Session-Id`` of a handshake-era
    client): an unknown or dead one is ``McpSessionIdUnknown`` (404, which
    tells the client to initialize again).
    """
    parsed = credential_read(request)
    if parsed is None:
        raise exceptions.NotAuthenticated()
    return _caller_checked(
        request,
        parsed,
        Caller(workspace=workspace, name=name),
        mcp_session_id,
        selectors.credential_rows(
            parsed, workspace=workspace, name=name, mcp_session_id=mcp_session_id
        ),
    )


def _caller_checked(
    request: HttpRequest,
    parsed: credentials.ParsedCredential,
    caller: Caller,
    mcp_session_id: str | None,
    rows: selectors.CredentialRows,
) -> Caller:
    if parsed.kind == credentials.SESSION_TOKEN:
        return Caller(session=_session_checked(request, parsed, rows.session))
    # The key is checked first, as alone, whichever way it was read.
    caller.key = check_key(request, parsed, rows.key)
    if caller.workspace is not None and caller.name is not None:
        caller.named_looked_up = True
        # An open session past its time is not connected: the next start replaces it.
        if rows.named is not None and rows.named.is_connected():
            caller.named = rows.named
    elif caller.name is None and mcp_session_id is not None:
        caller.session = _mcp_session_checked(rows.session)
    return caller


def _mcp_session_checked(session: Session | None) -> Session:
    # The id maps to its session in the database (mailbox.McpSession), so any
    # server process can answer, across restarts; ending the session ends it.
    try:
        if session is None:
            raise _refusal("invalid_token", "Unknown session id.")
        check_session_live(session)
    except exceptions.AuthenticationFailed as refusal:
        raise McpSessionIdUnknown(
            str(refusal.detail), code=getattr(refusal.detail, "code", None) or "invalid_token"
        ) from None
    return session


@dataclass(frozen=True)
class NamedIdentity:
    """What a key's caller may act as: a checked workspace and name, and the
    connected session of that name if there is one (else it is to be started)."""

    key: ProjectKey
    workspace: str
    name: str
    session: Session | None


def check_named_identity(
    caller: Caller, *, workspace: str | None = None, name: str | None = None
) -> NamedIdentity:
    """Decide which name a key's caller acts as, and whether a session of it is open.

    ``workspace`` and ``name`` (a tool's ``session_start`` arguments) fill in
    what the headers leave out and must agree with them: a result cannot
    switch the identity later calls carry. Raises ``validation_error``, also
    when no name is given at all.
    """
    _agree("workspace", workspace, caller.workspace)
    _agree("name", name, caller.name)
    if caller.name is None and name is not None:
        # Named by the argument, not the header: refused under its own name.
        handle_check(name)
    if caller.name is None and name is None:
        raise ValidationFailed.field(
            NAME_HEADER,
            "Required with a project key.",
            f"With a project key, send {NAME_HEADER} (and {WORKSPACE_HEADER}) to name the "
            "session to act as, or use a session token.",
        )
    workspace = _header_checked(caller.workspace or workspace, WORKSPACE_HEADER, _SLUG_RE)
    # Before the look-up: a reserved name is refused, not merely never found.
    name = handle_check(
        _header_checked(caller.name or name, NAME_HEADER, _HANDLE_RE), field=NAME_HEADER
    )
    if caller.named_looked_up and caller.workspace == workspace and caller.name == name:
        session = caller.named  # authentication has looked it up already
    else:
        session = selectors.session_connected_of_name(
            caller.key.project, workspace=workspace, name=name
        )
    return NamedIdentity(key=caller.key, workspace=workspace, name=name, session=session)


def caller_session(
    caller: Caller, *, workspace: str | None = None, name: str | None = None
) -> tuple[Session, StartedSession | None]:
    """The session a call acts as, resumed or started now (then with its start record).

    A token's or an MCP session id's session as it is; for a key, the
    connected session of the name it gives, started when there is none
    (``check_named_identity``). A start delivers nothing by itself: the
    pending notes ride on the result of the call that needed the session, as
    they do on REST's session start. Then the session's rate limit counts the
    call, as REST's does. Raises ``validation_error`` when a key names no
    session, the errors of ``session_start`` (``workspace_not_found``,
    ``name_taken``...) and ``throttled``.
    """
    if caller.session is not None:
        _agree("workspace", workspace, caller.session.workspace.slug)
        _agree("name", name, caller.session.name.handle)
        session, started = caller.session, None
    else:
        session, started = _session_resume_or_start(
            check_named_identity(caller, workspace=workspace, name=name)
        )
    rate_check(session)
    return session, started


def _session_resume_or_start(
    identity: NamedIdentity,
) -> tuple[Session, StartedSession | None]:
    if identity.session is not None:
        session_touch(identity.session)
        return identity.session, None
    rate_check(identity.key)
    try:
        started = session_start(identity.key, workspace_slug=identity.workspace, name=identity.name)
    except NameInUse:
        # Another request for the same name (a parallel tool call of this very
        # client, or another server process) started it between the look-up
        # and this start: act as that session.
        session = selectors.session_connected_of_name(
            identity.key.project, workspace=identity.workspace, name=identity.name
        )
        if session is None:
            raise
        session_touch(session)
        return session, None
    return started.session, started


def caller_open_generated(caller: Caller) -> OpenedMcpSession:
    """A session under a generated name and its MCP session id, for a key that
    names no session (a handshake-era ``initialize``)."""
    workspace = _header_checked(caller.workspace, WORKSPACE_HEADER, _SLUG_RE)
    rate_check(caller.key)
    return mcp_session_open(caller.key, workspace_slug=workspace)


_SLUG_RE = re.compile(limits.SLUG_PATTERN)
_HANDLE_RE = re.compile(limits.HANDLE_PATTERN)


def _header_checked(value: str | None, header: str, pattern: re.Pattern[str]) -> str:
    if value is None:
        raise ValidationFailed.field(
            header, "Required with a project key.", f"Send the {header} header."
        )
    if pattern.match(value) is None:
        raise ValidationFailed.field(
            header,
            "Use a lower-case slug or name as the operator gave it.",
            f"{header} is malformed.",
        )
    return value


def _agree(field: str, given: str | None, current: str | None) -> None:
    if given is not None and current is not None and given != current:
        raise ValidationFailed.field(
            field,
            f"This connection acts as {current!r}; omit it or pass that.",
            f"{field}: this connection acts as {current!r}.",
        )
