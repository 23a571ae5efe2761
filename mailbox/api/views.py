"""Mailbox API views: translate HTTP to service calls and back, nothing more."""

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response

from mailbox import services
from mailbox.api.serializers import (
    SessionCurrentOutput,
    SessionSerializer,
    SessionStartInput,
    SessionStartOutput,
)
from mailbox.errors import NameInUse, NameTaken, WorkspaceNotFound
from plumb_site.api import PlumbApiView, SessionApiView
from plumb_site.auth import IsProjectKey, ProjectKeyAuthentication
from plumb_site.schema import error_responses
from plumb_site.throttles import ProjectKeyRateThrottle


class SessionStartApi(PlumbApiView):
    authentication_classes = [ProjectKeyAuthentication]
    permission_classes = [IsProjectKey]
    throttle_classes = [ProjectKeyRateThrottle]

    @extend_schema(
        operation_id="session_start",
        summary="Start a session (needs a project key)",
        request=SessionStartInput,
        responses={
            201: SessionStartOutput,
            **error_responses(WorkspaceNotFound, NameInUse, NameTaken),
        },
        auth=[{"projectKey": []}],
        tags=["sessions"],
    )
    def post(self, request):
        data = SessionStartInput(data=request.data)
        data.is_valid(raise_exception=True)
        started = services.session_start(
            request.auth,
            workspace_slug=data.validated_data["workspace"],
            name=data.validated_data.get("name"),
        )
        # The envelope delivers the new session's pending notes with this reply.
        request.plumb_session = started.session
        body = {"session": SessionSerializer(started.session).data, "token": started.token}
        return Response(body, status=status.HTTP_201_CREATED)


class SessionCurrentApi(SessionApiView):
    @extend_schema(
        operation_id="session_current",
        summary="The calling session",
        responses={200: SessionCurrentOutput},
        auth=[{"sessionToken": []}],
        tags=["sessions"],
    )
    def get(self, request):
        return Response({"session": SessionSerializer(self.session).data})

    @extend_schema(
        operation_id="session_end",
        summary="End the calling session",
        description=(
            "Ends the session: its token stops working and notes bound to it fall back "
            "to its name. Notes pending at the time of the call are delivered in this reply."
        ),
        responses={200: SessionCurrentOutput},
        auth=[{"sessionToken": []}],
        tags=["sessions"],
    )
    def delete(self, request):
        session = services.session_end(self.session)
        return Response({"session": SessionSerializer(session).data})
