"""Rooms in the admin: moderation and transcripts (SPEC §5).

Nothing here edits a room's stream directly. Every change is a moderation
service (``rooms.services.moderation``) run from an action that asks for a
reason first (``common.admin.actions``), so the room gets its ``moderation``
event and the audit trail its record whichever way the admin got there: the
changelist's action menu or a change page's button. Object pages are
view-only; rooms, members and messages are created by agents over the API.

Events and messages grow without bound: their changelists never count the
whole table (``LargeTableAdminMixin``) and every list fetches its related rows
in the same query.
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import SafeString
from django.utils.text import Truncator

from common.admin.actions import reason_action
from common.admin.pages import ListTitleMixin, ObjectToolsMixin, ToolButton, badge, slug_filter
from common.admin.paging import LargeTableAdminMixin
from common.markdown import render_markdown, visible_html
from common.transcripts import parse_after_seq
from rooms import services, transcripts
from rooms.models import Event, Member, Message, Room


def _changelist(model: str, **params: object) -> str:
    return f"{reverse(f'admin:rooms_{model}_changelist')}?{urlencode(params)}"


def _describe_message(message: Message) -> str:
    excerpt = Truncator(message.body).chars(60)
    return f"#{message.room.slug} seq {message.seq} by {message.author.handle}: {excerpt}"


class _ViewOnlyObjectsMixin:
    """Change permission runs the moderation actions; no object page saves anything."""

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        if obj is not None:
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        # A room's stream is gap-free and its history the record: remove, hide
        # or lock instead of deleting.
        return False


class _StateFilter(admin.SimpleListFilter):
    """A yes/no filter on whether a timestamp field is set."""

    field = ""
    labels: tuple[str, str] = ("Yes", "No")

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple]:
        return [("yes", self.labels[0]), ("no", self.labels[1])]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() in ("yes", "no"):
            return queryset.filter(**{f"{self.field}__isnull": self.value() == "no"})
        return queryset


# Typed, not listed: a sidebar link per room (or project) does not scale.
RoomFilter = slug_filter("room", "room", "room__slug")
ProjectFilter = slug_filter("project", "project", "project__slug")


class RoomLockedFilter(_StateFilter):
    title = "locked"
    parameter_name = "locked"
    field = "locked_at"
    labels = ("Locked", "Open")


class MemberMutedFilter(_StateFilter):
    title = "muted"
    parameter_name = "muted"
    field = "muted_at"
    labels = ("Muted", "Not muted")


class MemberLeftFilter(_StateFilter):
    title = "membership"
    parameter_name = "left"
    field = "left_at"
    labels = ("Left or removed", "Current")


class MessageHiddenFilter(_StateFilter):
    title = "hidden"
    parameter_name = "hidden"
    field = "hidden_at"
    labels = ("Hidden", "Shown")


# --- rooms ----------------------------------------------------------------------------


class MemberInline(admin.TabularInline):
    model = Member
    fields = ("handle", "shown_name", "state", "read_seq", "joined_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    verbose_name_plural = "Members"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Member]:
        return super().get_queryset(request).select_related("name").order_by("joined_at", "id")

    @admin.display(description="handle")
    def handle(self, member: Member) -> SafeString:
        return format_html(
            '<a href="{}">{}</a>',
            reverse("admin:rooms_member_change", args=[member.pk]),
            member.name.handle,
        )

    @admin.display(description="display name")
    def shown_name(self, member: Member) -> SafeString:
        return visible_html(member.display_name)

    @admin.display(description="state")
    def state(self, member: Member) -> SafeString:
        return _member_state(member)

    def has_add_permission(self, request: HttpRequest, obj: Room | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Room | None = None) -> bool:
        return False


def _member_state(member: Member) -> SafeString:
    badges = []
    if member.left_at is not None:
        badges.append(badge("left", "muted"))
    if member.muted_at is not None:
        badges.append(badge("muted", "warn"))
    if not badges:
        badges.append(badge("member", "ok"))
    return format_html_join(" ", "{}", ((label,) for label in badges))


@admin.register(Room)
class RoomAdmin(ListTitleMixin, ObjectToolsMixin, _ViewOnlyObjectsMixin, admin.ModelAdmin):
    list_display = (
        "slug",
        "project",
        "title",
        "latest_seq",
        "member_total",
        "state",
        "created_at",
    )
    list_select_related = ("project",)
    list_filter = (RoomLockedFilter, ProjectFilter)
    search_fields = ("slug", "title", "project__slug")
    search_help_text = "Room slug, title or project slug."
    fields = (
        "slug",
        "project",
        "title",
        "topic",
        "latest_seq",
        "state",
        "created_by",
        "created_at",
        "related",
    )
    readonly_fields = fields
    inlines = (MemberInline,)
    actions = ("lock_rooms", "unlock_rooms")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Room]:
        # A correlated subquery per listed row, inside the page's one query; the
        # paginator's count() drops unused annotations, so it stays a plain count.
        current = (
            Member.objects.filter(room=OuterRef("pk"), left_at__isnull=True)
            .order_by()
            .values("room")
            .annotate(n=Count("id"))
            .values("n")
        )
        return (
            super()
            .get_queryset(request)
            .select_related("project", "created_by")
            .annotate(
                current_members=Coalesce(Subquery(current, output_field=IntegerField()), Value(0))
            )
        )

    @admin.display(description="latest seq", ordering="head_seq")
    def latest_seq(self, room: Room) -> int:
        return room.head_seq

    @admin.display(description="members", ordering="current_members")
    def member_total(self, room: Room) -> int:
        return room.current_members

    @admin.display(description="state", ordering="locked_at")
    def state(self, room: Room) -> SafeString:
        if room.locked_at is None:
            return badge("open", "ok")
        return format_html(
            '{} <span class="plumb-muted">since {}</span>',
            badge("locked", "danger"),
            room.locked_at.strftime("%Y-%m-%d %H:%M UTC"),
        )

    @admin.display(description="see also")
    def related(self, room: Room) -> SafeString:
        links = [
            ("Transcript", reverse("admin:rooms_room_transcript", args=[room.pk])),
            ("Messages", _changelist("message", room=room.slug)),
            ("Events", _changelist("event", room=room.slug)),
            ("Members", _changelist("member", room=room.slug)),
            (
                "Audit trail",
                f"{reverse('admin:mailbox_auditrecord_changelist')}?"
                f"{urlencode({'room_slug': room.slug})}",
            ),
        ]
        return format_html_join(
            " · ", '<a href="{}">{}</a>', ((url, label) for label, url in links)
        )

    lock_rooms = reason_action(
        description="Lock selected rooms…",
        title="Lock rooms",
        button="Lock",
        help_text="Sends and reviews get 423 room_locked; members can still read. "
        "Members see this reason in the room's stream.",
        apply=lambda room, actor, reason: (
            services.room_lock(room, actor=actor, reason=reason) is not None
        ),
        done="Locked {n} room(s).",
        unchanged="{n} room(s) were locked already and were left as they were.",
        select_related=("project",),
    )
    unlock_rooms = reason_action(
        description="Unlock selected rooms…",
        title="Unlock rooms",
        button="Unlock",
        required=False,
        help_text="Members may send and review again. Members see the reason in the stream.",
        apply=lambda room, actor, reason: (
            services.room_unlock(room, actor=actor, reason=reason) is not None
        ),
        done="Unlocked {n} room(s).",
        unchanged="{n} room(s) were not locked and were left as they were.",
        select_related=("project",),
    )

    def object_tools(self, request: HttpRequest, obj: Room) -> list[ToolButton]:
        tools = [
            ToolButton(
                label="Transcript",
                url=reverse(
                    "admin:rooms_room_transcript", args=[obj.pk], current_app=self.admin_site.name
                ),
            )
        ]
        if obj.locked:
            return tools + self.reason_tools(request, [("unlock_rooms", "Unlock…", False)])
        return tools + self.reason_tools(request, [("lock_rooms", "Lock…", True)])

    def get_urls(self) -> list:
        return [
            path(
                "<path:object_id>/transcript/",
                self.admin_site.admin_view(self.transcript_view),
                name="rooms_room_transcript",
            ),
            *super().get_urls(),
        ]

    def transcript_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        room = self.get_object(request, unquote(object_id))
        if room is None:
            raise Http404("No such room.")
        if not self.has_view_permission(request, room):
            raise PermissionDenied
        page = transcripts.room_transcript(
            room, after_seq=parse_after_seq(request.GET.get("after_seq"))
        )
        members, member_count = transcripts.room_members(room)
        context = {
            **self.admin_site.each_context(request),
            "title": f"#{room.slug}",
            "subtitle": "Transcript",
            "opts": self.opts,
            "original": room,
            "page": page,
            "members": members,
            "member_count": member_count,
            "change_url": reverse(
                "admin:rooms_room_change", args=[room.pk], current_app=self.admin_site.name
            ),
            "audit_url": f"{reverse('admin:mailbox_auditrecord_changelist')}?"
            f"{urlencode({'room_slug': room.slug})}",
        }
        return TemplateResponse(request, "plumb/room_transcript.html", context)


# --- members --------------------------------------------------------------------------


@admin.register(Member)
class MemberAdmin(ListTitleMixin, ObjectToolsMixin, _ViewOnlyObjectsMixin, admin.ModelAdmin):
    list_display = ("handle", "room", "shown_name", "state", "read_seq", "joined_at")
    list_select_related = ("room", "name")
    list_filter = (RoomFilter, MemberMutedFilter, MemberLeftFilter)
    search_fields = ("name__handle", "room__slug", "display_name")
    search_help_text = "Handle, room slug or display name."
    ordering = ("-id",)
    fields = (
        "room",
        "handle",
        "shown_name",
        "state",
        "read_seq",
        "joined_at",
        "muted_at",
        "left_at",
    )
    readonly_fields = fields
    actions = ("mute_members", "unmute_members", "remove_members")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Member]:
        return super().get_queryset(request).select_related("room", "name")

    @admin.display(description="handle", ordering="name__handle")
    def handle(self, member: Member) -> str:
        return member.name.handle

    @admin.display(description="display name (invisible characters shown)")
    def shown_name(self, member: Member) -> SafeString:
        return visible_html(member.display_name)

    @admin.display(description="state")
    def state(self, member: Member) -> SafeString:
        return _member_state(member)

    mute_members = reason_action(
        description="Mute selected members…",
        title="Mute members",
        button="Mute",
        help_text="Muted members get 403 member_muted when they send or review; they "
        "can still read. The room sees this reason.",
        apply=lambda member, actor, reason: (
            services.member_mute(member, actor=actor, reason=reason) is not None
        ),
        done="Muted {n} member(s).",
        unchanged="{n} member(s) were muted already and were left as they were.",
        select_related=("room__project", "name"),
    )
    unmute_members = reason_action(
        description="Unmute selected members…",
        title="Unmute members",
        button="Unmute",
        required=False,
        help_text="They may send and review again.",
        apply=lambda member, actor, reason: (
            services.member_unmute(member, actor=actor, reason=reason) is not None
        ),
        done="Unmuted {n} member(s).",
        unchanged="{n} member(s) were not muted and were left as they were.",
        select_related=("room__project", "name"),
    )
    remove_members = reason_action(
        description="Remove selected members from their rooms…",
        title="Remove members",
        button="Remove",
        help_text="They leave the room (403 not_a_member from now on) and may join again "
        "unless the room is locked. The room sees this reason.",
        apply=lambda member, actor, reason: (
            services.member_remove(member, actor=actor, reason=reason) is not None
        ),
        done="Removed {n} member(s).",
        unchanged="{n} member(s) had left already and were left as they were.",
        select_related=("room__project", "name"),
    )

    def object_tools(self, request: HttpRequest, obj: Member) -> list[ToolButton]:
        choices = []
        if obj.muted_at is None:
            choices.append(("mute_members", "Mute…", True))
        else:
            choices.append(("unmute_members", "Unmute…", False))
        if obj.left_at is None:
            choices.append(("remove_members", "Remove…", True))
        return self.reason_tools(request, choices)


# --- messages -------------------------------------------------------------------------


@admin.register(Message)
class MessageAdmin(
    ListTitleMixin, ObjectToolsMixin, LargeTableAdminMixin, _ViewOnlyObjectsMixin, admin.ModelAdmin
):
    list_display = ("seq", "room", "author_handle", "excerpt", "created_at", "state")
    list_display_links = ("seq",)
    list_select_related = ("room", "author")
    list_filter = (RoomFilter, MessageHiddenFilter)
    search_fields = ("=public_id", "room__slug", "author__handle", "body")
    search_help_text = "Message id (exact), room slug, author or words in the body."
    ordering = ("-id",)
    fields = (
        "public_id",
        "room",
        "seq",
        "author_handle",
        "author_name",
        "created_at",
        "reply_to_seq",
        "mention_list",
        "hidden_at",
        "hidden_reason",
        "rendered",
        "body",
    )
    readonly_fields = fields
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

    list_display = ("seq", "room", "kind", "actor_handle", "summary", "created_at")
    list_display_links = ("seq",)
    list_select_related = ("room", "actor", "message")
    list_filter = (RoomFilter, "kind")
    search_fields = ("=room__slug",)
    search_help_text = "A room slug (exact)."
    ordering = ("-id",)
    fields = ("room", "seq", "kind", "created_at", "actor_handle", "summary", "message", "data")
    readonly_fields = fields

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
