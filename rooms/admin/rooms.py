"""Rooms in the admin: the room list and page, its members inline, the lock and
unlock actions and the room's transcript (``admin:rooms_room_transcript``).
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

from common.admin.actions import ActionsNeedChangeMixin, reason_action
from common.admin.pages import (
    ListTitleMixin,
    ObjectToolsMixin,
    ToolButton,
    badge,
    utc_column,
    utc_time,
)
from common.markdown import visible_html
from common.transcripts import parse_after_seq
from rooms import services, transcripts
from rooms.admin import people
from rooms.admin.base import (
    ProjectFilter,
    RoomLockedFilter,
    RoomPausedFilter,
    _changelist,
    _member_state,
    _ViewOnlyObjectsMixin,
    with_departures,
)
from rooms.models import Member, Room


class MemberInline(admin.TabularInline):
    model = Member
    # Four columns, the display name under the handle, so that a phone shows them all.
    fields = ("member", "state", "read_seq", "joined")
    readonly_fields = fields
    joined = utc_column("joined_at", "joined")
    extra = 0
    can_delete = False
    verbose_name_plural = "Members"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Member]:
        members = super().get_queryset(request).select_related("name")
        return with_departures(members).order_by("joined_at", "id")

    @admin.display(description="member")
    def member(self, member: Member) -> SafeString:
        shown_name = (
            format_html('<div class="plumb-small">{}</div>', visible_html(member.display_name))
            if member.display_name
            else ""
        )
        return format_html(
            '<a href="{}">{}</a>{}',
            reverse("admin:rooms_member_change", args=[member.pk]),
            member.name.handle,
            shown_name,
        )

    @admin.display(description="state")
    def state(self, member: Member) -> SafeString:
        return _member_state(member)

    def has_add_permission(self, request: HttpRequest, obj: Room | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Room | None = None) -> bool:
        return False


@admin.register(Room)
class RoomAdmin(
    ActionsNeedChangeMixin,
    ListTitleMixin,
    ObjectToolsMixin,
    _ViewOnlyObjectsMixin,
    admin.ModelAdmin,
):
    list_display = (
        "slug",
        "project",
        "title",
        "latest_seq",
        "member_total",
        "state",
        "created",
    )
    list_select_related = ("project",)
    list_filter = (RoomLockedFilter, RoomPausedFilter, ProjectFilter)
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
        "created",
        "related",
    )
    readonly_fields = fields
    created = utc_column("created_at", "created")
    inlines = (MemberInline,)
    actions = ("lock_rooms", "unlock_rooms", "resume_rooms")

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
        if room.locked_at is None and services.room_paused_now(room):
            return format_html(
                '{} <span class="plumb-muted">until {}</span>',
                badge("paused", "warn"),
                utc_time(room.paused_until),
            )
        if room.locked_at is None:
            return badge("open", "ok")
        return format_html(
            '{} <span class="plumb-muted">since {}</span>',
            badge("locked", "danger"),
            utc_time(room.locked_at),
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

    resume_rooms = reason_action(
        description="Resume selected paused rooms…",
        title="Resume rooms",
        button="Resume",
        required=False,
        help_text="A room pauses itself for a minute when agents post past its project's "
        "room_flood_limit; resuming lets sends through at once. Members see the reason in "
        "the stream.",
        apply=lambda room, actor, reason: (
            services.room_resume(room, actor=actor, reason=reason) is not None
        ),
        done="Resumed {n} room(s).",
        unchanged="{n} room(s) were not paused and were left as they were.",
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
        if services.room_paused_now(obj):
            tools += self.reason_tools(request, [("resume_rooms", "Resume…", False)])
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
        """The room's stream; for a person (``people``), with the compose box and
        review buttons. A GET moves a person's read position; a HEAD, like it
        without effect (SPEC §2), does not."""
        room = self.get_object(request, unquote(object_id))
        if room is None:
            raise Http404("No such room.")
        if not self.has_view_permission(request, room):
            raise PermissionDenied
        transcript_url = reverse(
            "admin:rooms_room_transcript", args=[room.pk], current_app=self.admin_site.name
        )
        talk = people.room_talk(request, room, transcript_url)
        if request.method == "POST":
            if talk is None:
                raise PermissionDenied
            done = talk.post()
            if done is not None:
                return done
            room.refresh_from_db()
        page = transcripts.room_transcript(
            room, after_seq=parse_after_seq(request.GET.get("after_seq"))
        )
        if talk is not None:
            talk.read(page)
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
            **(talk.context(page) if talk is not None else {}),
        }
        return TemplateResponse(request, "plumb/room_transcript.html", context)
