"""Messages and events in the admin: every room's messages (hide and unhide,
with a reason) and its event stream, read-only.

Both tables grow without bound: their changelists never count the whole table
(``LargeTableAdminMixin``) and every list fetches its related rows in the same
query.
"""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.safestring import SafeString
from django.utils.text import Truncator

from common.admin.actions import ActionsNeedChangeMixin, reason_action
from common.admin.pages import ListTitleMixin, ObjectToolsMixin, ToolButton, badge, utc_column
from common.admin.paging import LargeTableAdminMixin
from common.admin.search import FullTextSearchMixin
from common.markdown import render_markdown, visible_html
from rooms import services
from rooms.admin.base import (
    MessageHiddenFilter,
    RoomFilter,
    _describe_message,
    _ViewOnlyObjectsMixin,
)
from rooms.models import Event, Message
from rooms.selectors.search import messages_matching


@admin.register(Message)
class MessageAdmin(
    ActionsNeedChangeMixin,
    ListTitleMixin,
    ObjectToolsMixin,
    FullTextSearchMixin,
    LargeTableAdminMixin,
    _ViewOnlyObjectsMixin,
    admin.ModelAdmin,
):
    list_display = ("seq", "room", "author_handle", "excerpt", "created", "state")
    list_display_links = ("seq",)
    list_select_related = ("room", "author")
    list_filter = (RoomFilter, MessageHiddenFilter)
    # Words of the body go through the full-text index (FullTextSearchMixin).
    search_fields = ("=public_id", "room__slug", "author__handle")
    search_matching = messages_matching
    search_replaces = "excerpt"
    search_help_text = (
        'Message id (exact), room slug, author, or words of the body: "a phrase", '
        "-word to leave out, prefix*."
    )
    ordering = ("-id",)
    fields = (
        "public_id",
        "room",
        "seq",
        "author_handle",
        "author_name",
        "created",
        "reply_to_seq",
        "mention_list",
        "hidden_on",
        "hidden_reason",
        "rendered",
        "body",
    )
    readonly_fields = fields
    created = utc_column("created_at", "sent", seconds=True)
    hidden_on = utc_column("hidden_at", "hidden")
    actions = ("hide_messages", "unhide_messages")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Message]:
        return super().get_queryset(request).select_related("room", "author", "reply_to")

    @admin.display(description="author", ordering="author__handle")
    def author_handle(self, message: Message) -> str:
        return message.author.handle

    @admin.display(description="author's display name (invisible characters shown)")
    def author_name(self, message: Message) -> SafeString:
        return visible_html(message.author_display_name)

    @admin.display(description="body")
    def excerpt(self, message: Message) -> SafeString:
        text = Truncator(message.body).chars(90)
        if message.hidden:
            return format_html('<span class="plumb-hidden-text">{}</span>', text)
        return format_html("{}", text)

    @admin.display(description="state", ordering="hidden_at")
    def state(self, message: Message) -> SafeString:
        return badge("hidden", "danger") if message.hidden else badge("shown", "muted")

    @admin.display(description="reply to")
    def reply_to_seq(self, message: Message) -> str:
        return f"seq {message.reply_to.seq}" if message.reply_to_id else "-"

    @admin.display(description="mentions")
    def mention_list(self, message: Message) -> str:
        return ", ".join(f"@{m.get('handle', '')}" for m in message.mentions) or "-"

    @admin.display(description="as rendered (sanitised)")
    def rendered(self, message: Message) -> SafeString:
        handles = [m.get("handle", "") for m in message.mentions]
        return format_html(
            '<div class="plumb-body">{}</div>',
            render_markdown(message.body, mentions=handles),
        )

    hide_messages = reason_action(
        description="Hide selected messages…",
        title="Hide messages",
        button="Hide",
        help_text="Agents will see the message as hidden, without its body, and a "
        "moderation event with this reason in the room's stream.",
        apply=lambda message, actor, reason: (
            services.message_hide(message, actor=actor, reason=reason) is not None
        ),
        done="Hid {n} message(s).",
        unchanged="{n} message(s) were hidden already and were left as they were.",
        select_related=("room__project", "author"),
        describe=_describe_message,
    )
    unhide_messages = reason_action(
        description="Unhide selected messages…",
        title="Unhide messages",
        button="Unhide",
        required=False,
        help_text="Agents get the body again; the room's stream records the change.",
        apply=lambda message, actor, reason: (
            services.message_unhide(message, actor=actor, reason=reason) is not None
        ),
        done="Unhid {n} message(s).",
        unchanged="{n} message(s) were not hidden and were left as they were.",
        select_related=("room__project", "author"),
        describe=_describe_message,
    )

    def object_tools(self, request: HttpRequest, obj: Message) -> list[ToolButton]:
        around = max(obj.seq - 6, 0)
        transcript = reverse(
            "admin:rooms_room_transcript", args=[obj.room_id], current_app=self.admin_site.name
        )
        tools = [
            ToolButton(
                label="In the transcript",
                url=f"{transcript}?{urlencode({'after_seq': around})}#seq-{obj.seq}",
            )
        ]
        if obj.hidden:
            return tools + self.reason_tools(request, [("unhide_messages", "Unhide…", False)])
        return tools + self.reason_tools(request, [("hide_messages", "Hide…", True)])


# --- events ---------------------------------------------------------------------------


@admin.register(Event)
class EventAdmin(ListTitleMixin, LargeTableAdminMixin, admin.ModelAdmin):
    """Every event of every room, read-only; filter by room from the room's page."""

    list_display = ("seq", "room", "kind", "actor_handle", "summary", "created")
    list_display_links = ("seq",)
    list_select_related = ("room", "actor", "message")
    list_filter = (RoomFilter, "kind")
    search_fields = ("=room__slug",)
    search_help_text = "A room slug (exact)."
    ordering = ("-id",)
    fields = ("room", "seq", "kind", "created", "actor_handle", "summary", "message", "data")
    readonly_fields = fields
    created = utc_column("created_at", "when", seconds=True)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Event]:
        return super().get_queryset(request).select_related("room", "actor", "message")

    @admin.display(description="actor", ordering="actor__handle")
    def actor_handle(self, event: Event) -> str:
        return event.actor.handle if event.actor_id else "operator"

    @admin.display(description="what")
    def summary(self, event: Event) -> str:
        if event.kind == Event.Kind.MESSAGE:
            if not event.message_id:
                return ""
            excerpt = Truncator(event.message.body).chars(70)
            return f"[hidden] {excerpt}" if event.message.hidden else excerpt
        if event.kind == Event.Kind.REVIEW:
            target = f" on seq {event.message.seq}" if event.message_id else ""
            return f"{event.get_verdict_display()}{target}"
        if event.kind == Event.Kind.MODERATION:
            action = event.data.get("action", "")
            who = event.data.get("member") or (
                f"seq {event.message.seq}" if event.message_id else "room"
            )
            return f"{action} {who}: {event.data.get('reason', '')}".strip(": ")
        return ""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Event | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Event | None = None) -> bool:
        return False
