"""Rooms API views: translate HTTP to service and selector calls, nothing more."""

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response

from common.errors import BodyTooLarge, StoredBodyTooLarge
from common.schema import error_responses
from common.search.query import InvalidQuery
from common.validation import validated
from mailbox.api.base import SessionApiView
from mailbox.errors import BudgetExhausted
from rooms import representation, selectors, services
from rooms.api import serializers as s
from rooms.errors import (
    MemberMuted,
    MessageIdempotencyKeyReused,
    MessageNotFound,
    NotAMember,
    ReplyToNotFound,
    RoomCrossProjectRefused,
    RoomExists,
    RoomLocked,
    RoomNotFound,
    RoomPaused,
    UnreadMessages,
)
from rooms.selectors.search import search_asked

SESSION_AUTH = [{"sessionToken": []}]


class RoomListApi(SessionApiView):
    @extend_schema(
        operation_id="list_rooms",
        summary="Rooms you may see: your project's and those you joined",
        parameters=[s.RoomListInput],
        responses={200: s.RoomListOutput},
        auth=SESSION_AUTH,
        tags=["rooms"],
    )
    def get(self, request):
        query = validated(s.RoomListInput, request.query_params)
        rooms, has_more = selectors.room_list_for_session(self.session, **query)
        return Response(representation.room_list_body(rooms, has_more))

    @extend_schema(
        operation_id="create_room",
        summary="Create a room in your project; you join it",
        request=s.RoomCreateInput,
        responses={201: s.RoomEnteredOutput, **error_responses(RoomExists)},
        auth=SESSION_AUTH,
        tags=["rooms"],
    )
    def post(self, request):
        created = services.room_create(self.session, **validated(s.RoomCreateInput, request.data))
        room = selectors.room_get_for_session(self.session, created.room.slug)
        body = representation.room_event_body(room, created.event, scrubbed=created.scrubbed)
        return Response(body, status=status.HTTP_201_CREATED)


class RoomDetailApi(SessionApiView):
    @extend_schema(
        operation_id="get_room",
        summary="One room",
        responses={200: s.RoomOutput, **error_responses(RoomNotFound, NotAMember)},
        auth=SESSION_AUTH,
        tags=["rooms"],
    )
    def get(self, request, slug: str):
        room = selectors.room_get_for_session(self.session, slug)
        return Response({"room": representation.room_json(room)})


class RoomJoinApi(SessionApiView):
    @extend_schema(
        operation_id="join_room",
        summary="Join a room (joining again changes nothing)",
        request=s.RoomJoinInput,
        responses={
            201: s.RoomEnteredOutput,
            200: s.RoomEnteredOutput,
            **error_responses(RoomNotFound, RoomCrossProjectRefused),
        },
        auth=SESSION_AUTH,
        tags=["rooms"],
    )
    def post(self, request, slug: str):
        data = validated(s.RoomJoinInput, request.data)
        joined = services.room_join(self.session, slug, display_name=data.get("display_name"))
        room = selectors.room_get_for_session(self.session, slug)
        code = status.HTTP_201_CREATED if joined.event is not None else status.HTTP_200_OK
        body = representation.room_event_body(room, joined.event, scrubbed=joined.scrubbed)
        return Response(body, status=code)


class RoomLeaveApi(SessionApiView):
    @extend_schema(
        operation_id="leave_room",
        summary="Leave a room",
        request=s.RoomLeaveInput,
        responses={200: s.RoomEventOutput, **error_responses(RoomNotFound, NotAMember)},
        auth=SESSION_AUTH,
        tags=["rooms"],
    )
    def post(self, request, slug: str):
        validated(s.RoomLeaveInput, request.data)
        room, event = services.room_leave(self.session, slug)
        # Not re-read through the visibility rule: a room of another project
        # is no longer visible once left, but the reply still describes it.
        return Response(representation.room_event_body(room, event))


class MemberListApi(SessionApiView):
    @extend_schema(
        operation_id="list_members",
        summary="Current members of a room",
        responses={200: s.MemberListOutput, **error_responses(RoomNotFound, NotAMember)},
        auth=SESSION_AUTH,
        tags=["rooms"],
    )
    def get(self, request, slug: str):
        room = selectors.room_get_for_session(self.session, slug)
        members = selectors.member_list(room)
        return Response({"members": s.MemberSerializer(members, many=True).data})


class MessagesApi(SessionApiView):
    @extend_schema(
        operation_id="send_message",
        summary="Post a markdown message to a room you joined",
        description=(
            "Returns the stored message with its seq and the room's latest_seq. Pass "
            "idempotency_key to make retries safe, and require_read: true when the "
            "message states the room's state: the send is then refused while messages "
            "or reviews from others sit after after_seq (or your read position)."
        ),
        request=s.MessageSendInput,
        responses={
            201: s.MessageSendOutput,
            200: s.MessageSendOutput,
            **error_responses(
                BodyTooLarge,
                StoredBodyTooLarge,
                NotAMember,
                MemberMuted,
                RoomNotFound,
                ReplyToNotFound,
                UnreadMessages,
                MessageIdempotencyKeyReused,
                RoomLocked,
                RoomPaused,
                BudgetExhausted,
            ),
        },
        auth=SESSION_AUTH,
        tags=["rooms"],
    )
    def post(self, request, slug: str):
        fields = validated(s.MessageSendInput, request.data)
        sent = services.message_send(self.session, slug, **fields)
        body = representation.message_sent_body(sent)
        return Response(body, status=status.HTTP_200_OK if sent.replayed else 201)

    @extend_schema(
        operation_id="read_messages",
        summary="Read a room's events after a seq",
        description=(
            "Events with seq above after_seq (default: your read position), ascending. "
            "Moves your read position to the highest seq returned unless mark_read=false. "
            "With `wait`, a read that would return nothing holds until an event above the "
            "reference (of the kinds asked for) exists or the seconds pass. A newer waiting "
            "call of the session (notes, room or activity) ends it with no events."
        ),
        parameters=[s.EventsReadInput],
        responses={200: s.EventsReadOutput, **error_responses(RoomNotFound, NotAMember)},
        auth=SESSION_AUTH,
        tags=["rooms"],
    )
    def get(self, request, slug: str):
        query = validated(s.EventsReadInput, request.query_params)
        read = services.events_read(self.session, slug, **query)
        return Response(representation.events_read_body(read))


class MessageDetailApi(SessionApiView):
    @extend_schema(
        operation_id="get_message",
        summary="One message with its read receipts (members only)",
        description=(
            "read_by and unread_by are the room's current members other than the author "
            "whose read position has reached the message's seq, and those whose has not. "
            "Reading it moves no read position."
        ),
        responses={
            200: s.MessageReceiptsOutput,
            **error_responses(RoomNotFound, NotAMember, MessageNotFound),
        },
        auth=SESSION_AUTH,
        tags=["rooms"],
    )
    def get(self, request, slug: str, message_id: str):
        found = selectors.message_receipts_for_session(self.session, slug, message_id)
        return Response(representation.message_receipts_body(*found))


class ReadPositionApi(SessionApiView):
    @extend_schema(
        operation_id="mark_read",
        summary="Set your read position (forward only)",
        request=s.ReadInput,
        responses={200: s.ReadOutput, **error_responses(RoomNotFound, NotAMember)},
        auth=SESSION_AUTH,
        tags=["rooms"],
    )
    def post(self, request, slug: str):
        data = validated(s.ReadInput, request.data)
        room, member = services.read_position_set(self.session, slug, seq=data["seq"])
        return Response(representation.read_position_body(room, member))


class ReviewApi(SessionApiView):
    @extend_schema(
        operation_id="review_message",
        summary="Review a message: approve, request_changes or comment",
        request=s.ReviewInput,
        responses={
            201: s.ReviewOutput,
            **error_responses(
                BodyTooLarge,
                StoredBodyTooLarge,
                NotAMember,
                MemberMuted,
                RoomNotFound,
                MessageNotFound,
                RoomLocked,
                RoomPaused,
                BudgetExhausted,
            ),
        },
        auth=SESSION_AUTH,
        tags=["rooms"],
    )
    def post(self, request, slug: str, message_id: str):
        data = validated(s.ReviewInput, request.data)
        room, event = services.review_add(
            self.session,
            slug,
            message_id,
            verdict=data["verdict"],
            body=data.get("body"),
        )
        return Response(representation.review_body(room, event), status=status.HTTP_201_CREATED)


class ActivityApi(SessionApiView):
    @extend_schema(
        operation_id="wait_for_activity",
        summary="Your pending notes and your rooms with news, waiting for either",
        description=(
            "Delivers your pending notes (as check_messages does) and lists the rooms you "
            "joined where a message or review by someone else sits above your read position "
            "(listed, not read: read them with read_messages). With `wait`, holds until there "
            "is either or the seconds pass. A newer waiting call of the session (notes, room "
            "or activity) ends it with nothing."
        ),
        parameters=[s.ActivityInput],
        responses={200: s.ActivityOutput},
        auth=SESSION_AUTH,
        tags=["rooms"],
    )
    def get(self, request):
        query = validated(s.ActivityInput, request.query_params)
        activity = services.activity_wait(self.session, wait=query["wait"])
        # Setting "notes" here tells the envelope the delivery is done.
        return Response(representation.activity_body(activity))


class MentionListApi(SessionApiView):
    @extend_schema(
        operation_id="list_mentions",
        summary="Messages that mention you, across rooms",
        parameters=[s.MentionsInput],
        responses={200: s.MentionListOutput, **error_responses(MessageNotFound)},
        auth=SESSION_AUTH,
        tags=["rooms"],
    )
    def get(self, request):
        query = validated(s.MentionsInput, request.query_params)
        messages, has_more = selectors.mentions_for_session(
            self.session,
            after_id=query.get("after_id"),
            limit=query["limit"],
        )
        return Response(
            {"mentions": s.MessageSerializer(messages, many=True).data, "has_more": has_more}
        )


class SearchApi(SessionApiView):
    @extend_schema(
        operation_id="search",
        summary="Search the messages and notes you may read, best matches first",
        description=(
            "Messages of rooms you are a current member of (never hidden ones) and notes "
            'of threads you take part in. Every word must match; "quoted phrases" match '
            "words next to each other; -word leaves out what has it; prefix* matches words "
            "that start so (3 characters at least). Case and accents do not matter. Page "
            "with cursor while has_more."
        ),
        parameters=[s.SearchInput],
        responses={
            200: s.SearchOutput,
            **error_responses(InvalidQuery, RoomNotFound, NotAMember),
        },
        auth=SESSION_AUTH,
        tags=["search"],
    )
    def get(self, request):
        # A plain mapping, not the QueryDict: DRF reads an empty value there as an
        # omitted one, where the tool refuses "" (SPEC §2: both doors agree).
        query = validated(s.SearchInput, request.query_params.dict())
        page = search_asked(self.session, query)
        return Response(representation.search_body(page))
