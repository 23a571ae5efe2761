"""Mailbox API views: translate HTTP to service calls and back, nothing more."""

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response

from common.errors import BodyTooLarge, StoredBodyTooLarge
from common.schema import error_responses
from common.validation import NoFieldsInput, validated
from mailbox import representation, selectors, services
from mailbox.api import serializers as s
from mailbox.api.auth import IsProjectKey, ProjectKeyAuthentication
from mailbox.api.base import PlumbApiView, SessionApiView, parsed_body
from mailbox.errors import (
    BudgetExhausted,
    ConversationExhausted,
    ConversationLocked,
    ConversationNotFound,
    CrossProjectRefused,
    IdempotencyKeyReused,
    MailboxDisabled,
    NameInUse,
    NameTaken,
    NotAParticipant,
    NoteNotFound,
    RecipientAmbiguous,
    RecipientNotFound,
    TooManySessions,
    WorkspaceNotFound,
)
from mailbox.throttles import ProjectKeyRateThrottle


class SessionStartApi(PlumbApiView):
    authentication_classes = [ProjectKeyAuthentication]
    permission_classes = [IsProjectKey]
    throttle_classes = [ProjectKeyRateThrottle]

    @extend_schema(
        operation_id="session_start",
        summary="Start a session (needs a project key)",
        description=(
            "Attaches a session to a workspace under a name (generated when omitted). "
            "The reply carries the session token, shown once, and every note waiting "
            'for the name or addressed to "next" of the workspace.'
        ),
        request=s.SessionStartInput,
        responses={
            201: s.SessionStartOutput,
            **error_responses(WorkspaceNotFound, NameInUse, NameTaken, TooManySessions),
        },
        auth=[{"projectKey": []}],
        tags=["sessions"],
    )
    def post(self, request):
        data = validated(s.SessionStartInput, request.data)
        started = services.session_start(
            request.auth,
            workspace_slug=data["workspace"],
            name=data.get("name"),
        )
        # The envelope delivers the new session's pending notes with this reply.
        request.plumb_session = started.session
        body = {"session": representation.session_json(started.session), "token": started.token}
        return Response(body, status=status.HTTP_201_CREATED)


class SessionCurrentApi(SessionApiView):
    @extend_schema(
        operation_id="session_current",
        summary="The calling session",
        responses={200: s.SessionCurrentOutput},
        auth=[{"sessionToken": []}],
        tags=["sessions"],
    )
    def get(self, request):
        return Response({"session": representation.session_json(self.session)})

    @extend_schema(
        operation_id="session_end",
        summary="End the calling session",
        description=(
            "Ends the session: its token stops working and notes bound to it fall back "
            "to its name. Notes pending at the time of the call are delivered in this reply. "
            "A JSON body, if sent, may carry only tool_schema_fingerprint."
        ),
        responses={200: s.SessionCurrentOutput},
        auth=[{"sessionToken": []}],
        tags=["sessions"],
    )
    def delete(self, request):
        validated(NoFieldsInput, parsed_body(request))
        session = services.session_end(self.session)
        return Response({"session": representation.session_json(session)})


class NotesApi(SessionApiView):
    @extend_schema(
        operation_id="leave_note",
        summary="Leave a note for a named peer or the next visitor of your workspace",
        description=(
            'Starts a thread (omit conversation_id; `to` defaults to "next") or replies '
            "into one (`to` defaults to the one other participant). Delivery is by "
            "polling, exactly once. The body is secret-scrubbed before it is stored."
        ),
        request=s.NoteLeaveInput,
        responses={
            201: s.NoteLeaveOutput,
            200: s.NoteLeaveOutput,
            **error_responses(
                BodyTooLarge,
                StoredBodyTooLarge,
                RecipientAmbiguous,
                MailboxDisabled,
                CrossProjectRefused,
                NotAParticipant,
                RecipientNotFound,
                ConversationNotFound,
                ConversationExhausted,
                ConversationLocked,
                IdempotencyKeyReused,
                BudgetExhausted,
            ),
        },
        auth=[{"sessionToken": []}],
        tags=["mailbox"],
    )
    def post(self, request):
        left = services.note_leave(self.session, **validated(s.NoteLeaveInput, request.data))
        body = representation.note_left_body(left)
        return Response(body, status=status.HTTP_200_OK if left.replayed else 201)

    @extend_schema(
        operation_id="check_messages",
        summary="Receive the notes pending for this session",
        description=(
            "Delivers every pending note, oldest first, and marks it delivered: each "
            "note is delivered to exactly one response. With `wait`, the call holds "
            "until a note arrives or the seconds pass."
        ),
        parameters=[s.NotesCheckInput],
        responses={200: s.EnvelopeSerializer},
        auth=[{"sessionToken": []}],
        tags=["mailbox"],
    )
    def get(self, request):
        query = validated(s.NotesCheckInput, request.query_params)
        notes = services.notes_wait(self.session, wait=query["wait"])
        # Setting "notes" here tells the envelope the delivery is done.
        return Response({"notes": representation.notes_json(notes)})


class NotesSentApi(SessionApiView):
    @extend_schema(
        operation_id="list_sent_notes",
        summary="Notes you sent, newest first, each with its state",
        description=(
            "The notes sent by your name, from any of its sessions: waiting (not picked up "
            "yet), delivered (delivered_to, delivered_at) or bounced (nobody picked it up "
            "within your project's note_ttl; it will never be delivered, and plumb left you "
            "a note in its thread saying so). With `wait`, the call holds until one of your "
            "waiting notes is delivered or bounced, or the seconds pass. Reading it changes "
            "no state."
        ),
        parameters=[s.NotesSentInput],
        responses={200: s.NotesSentOutput, **error_responses(NoteNotFound)},
        auth=[{"sessionToken": []}],
        tags=["mailbox"],
    )
    def get(self, request):
        query = validated(s.NotesSentInput, request.query_params)
        notes, has_more = services.notes_sent_wait(self.session, **query)
        return Response(representation.notes_sent_body(notes, has_more))


class ConversationListApi(SessionApiView):
    @extend_schema(
        operation_id="list_conversations",
        summary="Your threads, newest activity first",
        parameters=[s.ConversationListInput],
        responses={200: s.ConversationListOutput, **error_responses(ConversationNotFound)},
        auth=[{"sessionToken": []}],
        tags=["mailbox"],
    )
    def get(self, request):
        query = validated(s.ConversationListInput, request.query_params)
        threads, has_more = selectors.conversation_list_for_session(self.session, **query)
        return Response(representation.conversation_list_body(threads, has_more))


class ConversationDetailApi(SessionApiView):
    @extend_schema(
        operation_id="read_conversation",
        summary="One thread with all its notes (participants only)",
        description="Reading history does not change delivery state.",
        responses={
            200: s.ConversationDetailOutput,
            **error_responses(ConversationNotFound, NotAParticipant),
        },
        auth=[{"sessionToken": []}],
        tags=["mailbox"],
    )
    def get(self, request, conversation_id: str):
        conversation = selectors.conversation_get_for_session(self.session, conversation_id)
        return Response(representation.conversation_detail_body(conversation))
