"""REST's door to ``mailbox.callers``: DRF authentication and permission classes.

Who is calling is decided there, for REST and MCP alike; these classes only
tell DRF which kind of credential each view takes.
"""

from __future__ import annotations

from rest_framework import authentication, permissions
from rest_framework.request import Request

from mailbox import callers
from mailbox.models import ProjectKey, Session


class SessionTokenAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Session, Session] | None:
        session = callers.session_authenticate(request)
        if session is None:
            return None
        request.plumb_session = session  # the session the response's envelope serves
        return session, session

    def authenticate_header(self, request: Request) -> str:
        return callers.REALM


class ProjectKeyAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[ProjectKey, ProjectKey] | None:
        key = callers.key_authenticate(request)
        return None if key is None else (key, key)

    def authenticate_header(self, request: Request) -> str:
        return callers.REALM


class IsAgentSession(permissions.BasePermission):
    def has_permission(self, request: Request, view) -> bool:
        return isinstance(request.auth, Session)


class IsProjectKey(permissions.BasePermission):
    def has_permission(self, request: Request, view) -> bool:
        return isinstance(request.auth, ProjectKey)
