"""Bearer authentication for the two kinds of credential.

A project key may only start sessions; every other call takes a session
token. Each failure names its reason in the error code (``invalid_token``,
``key_revoked``, ``session_ended``, ``session_expired``...) so a client knows
whether to retry, start a new session, or ask its operator for a key.

A credential that matches nothing (``invalid_token``) counts against the
client's address (``PLUMB_RATE_AUTH_FAIL``, ``throttles.AuthFailureThrottle``);
past the rate every credential from that address is refused with ``429
throttled`` before it is looked up. Revoked, ended and expired credentials do
not count: only the real secret reaches them, so they are no guess, and a
revocation or a lapse that hits many agents behind one address (all of them on
127.0.0.1 under ``make serve``) must not lock the others out. Neither does a
credential of the wrong kind (it is not looked up), nor a request with none.
"""

from __future__ import annotations

from django.utils import timezone
from rest_framework import authentication, exceptions, permissions
from rest_framework.request import Request

from common.prepared import Prepared, concrete_attnames, instances_from_row
from mailbox import credentials
from mailbox.models import AgentName, Project, ProjectKey, Session, Workspace
from mailbox.services import key_touch, session_touch
from mailbox.services.delivery import pending_exists
from mailbox.throttles import AuthFailureThrottle

REALM = 'Bearer realm="plumb"'


def _fail(code: str, message: str) -> exceptions.AuthenticationFailed:
    return exceptions.AuthenticationFailed(message, code=code)


def _unknown(request: Request, message: str) -> exceptions.AuthenticationFailed:
    """``invalid_token`` for a credential that matches nothing, counted against the address."""
    AuthFailureThrottle().record(request)
    return _fail("invalid_token", message)


def bearer_credential(request: Request) -> credentials.ParsedCredential | None:
    """The parsed bearer credential, ``None`` when no Authorization header was sent.

    Raises ``Throttled`` first when the client's address has sent too many
    credentials that matched nothing: nothing it sends is looked up then.
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


_SESSION_MODELS = (Session, AgentName, Workspace, Project)
_session_by_prefix = Prepared(
    lambda prefix: (
        Session.objects.filter(token_prefix=prefix)
        .annotate(notes_maybe_pending=pending_exists())
        .order_by()
        .values_list(
            *concrete_attnames(Session),
            *(f"name__{f}" for f in concrete_attnames(AgentName)),
            *(f"workspace__{f}" for f in concrete_attnames(Workspace)),
            *(f"workspace__project__{f}" for f in concrete_attnames(Project)),
            "notes_maybe_pending",
        )
    ),
    params=["prefix"],
)


def session_for_prefix(prefix: str) -> Session | None:
    """The session with its name, workspace and project, and whether notes wait for it.

    Every session call starts here, so it is one query, compiled once.
    """
    rows = _session_by_prefix.rows(prefix=prefix)
    if not rows:
        return None
    session, name, workspace, project = instances_from_row(rows[0], *_SESSION_MODELS)
    workspace.project = project
    session.name = name
    session.workspace = workspace
    session.notes_maybe_pending = bool(rows[0][-1])
    return session


_key_by_prefix = Prepared(
    lambda prefix: (
        ProjectKey.objects.filter(prefix=prefix)
        .order_by()
        .values_list(
            *concrete_attnames(ProjectKey),
            *(f"project__{f}" for f in concrete_attnames(Project)),
        )
    ),
    params=["prefix"],
)


def key_for_prefix(prefix: str) -> ProjectKey | None:
    """The project key with its project: every session start begins here, so it is
    one query, compiled once."""
    rows = _key_by_prefix.rows(prefix=prefix)
    if not rows:
        return None
    key, project = instances_from_row(rows[0], ProjectKey, Project)
    key.project = project
    return key


def session_for_mcp_session_id(mcp_session_id: str, *, project: Project) -> Session | None:
    """The session an ``Mcp-Session-Id`` of ``project`` names, ended or not; else None.

    Ended and expired sessions come back so that ``session_check_live`` can
    say which, as it does for a token. An id of another project is None like
    an unknown one, so ids say nothing across projects. One query, and like
    ``session_for_prefix`` it tells whether notes wait.
    """
    return (
        Session.objects.filter(
            mcp_session__public_id=mcp_session_id, workspace__project_id=project.pk
        )
        .select_related("name", "workspace__project")
        .annotate(notes_maybe_pending=pending_exists())
        .first()
    )


def session_check_live(session: Session) -> None:
    """Refuse an ended or expired session, naming which; else record that it was seen.

    One rule for every way a request names its session (a token here, an
    MCP session id in ``plumb_site.mcp``), so both refuse alike.
    """
    if session.ended_at is not None:
        # The reason is a column of the row already read: still one query.
        if session.end_reason == Session.EndReason.KEY_REVOKED:
            raise _fail(
                "key_revoked", "The project key that started this session has been revoked."
            )
        raise _fail("session_ended", "This session has ended; start a new one.")
    now = timezone.now()
    if not session.is_connected(now):
        raise _fail("session_expired", "This session expired after inactivity; start a new one.")
    session_touch(session, now=now)


def project_key_check(
    request: Request, parsed: credentials.ParsedCredential, key: ProjectKey | None
) -> None:
    """Refuse a key that matches nothing or is revoked, naming which; else record its use.

    ``key`` is the row of ``parsed.prefix``, or None. One rule for every way a
    request's key is looked up (here, and with the session it names in
    ``plumb_site.mcp``), so both refuse alike.
    """
    if key is None or not credentials.matches(parsed.raw, key.key_hash):
        raise _unknown(request, "The project key is not known.")
    if key.revoked_at is not None:
        raise _fail("key_revoked", "This project key has been revoked.")
    key_touch(key)


class SessionTokenAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Session, Session] | None:
        parsed = bearer_credential(request)
        if parsed is None:
            return None
        if parsed.kind != credentials.SESSION_TOKEN:
            raise _fail(
                "session_token_required",
                "This call needs a session token; a project key only starts sessions.",
            )
        session = session_for_prefix(parsed.prefix)
        if session is None or not credentials.matches(parsed.raw, session.token_hash):
            raise _unknown(request, "The session token is not known.")
        session_check_live(session)
        return session, session

    def authenticate_header(self, request: Request) -> str:
        return REALM


class ProjectKeyAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[ProjectKey, ProjectKey] | None:
        parsed = bearer_credential(request)
        if parsed is None:
            return None
        if parsed.kind != credentials.PROJECT_KEY:
            raise _fail("project_key_required", "Starting a session needs a project key.")
        key = key_for_prefix(parsed.prefix)
        project_key_check(request, parsed, key)
        return key, key

    def authenticate_header(self, request: Request) -> str:
        return REALM


class IsAgentSession(permissions.BasePermission):
    def has_permission(self, request: Request, view) -> bool:
        return isinstance(request.auth, Session)


class IsProjectKey(permissions.BasePermission):
    def has_permission(self, request: Request, view) -> bool:
        return isinstance(request.auth, ProjectKey)
