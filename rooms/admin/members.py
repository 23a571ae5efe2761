"""Members in the admin: who is in which room, and the mute, unmute and remove
actions a moderator runs on them (each with a reason the room sees).
"""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.safestring import SafeString

from common.admin.actions import ActionsNeedChangeMixin, reason_action
from common.admin.pages import ListTitleMixin, ObjectToolsMixin, ToolButton, utc_column
from common.markdown import visible_html
from rooms import services
from rooms.admin.base import (
    MemberLeftFilter,
    MemberMutedFilter,
    RoomFilter,
    _member_state,
    _ViewOnlyObjectsMixin,
    with_departures,
)
from rooms.models import Member


@admin.register(Member)
class MemberAdmin(
    ActionsNeedChangeMixin,
    ListTitleMixin,
    ObjectToolsMixin,
    _ViewOnlyObjectsMixin,
    admin.ModelAdmin,
):
    list_display = ("handle", "room", "shown_name", "state", "read_seq", "joined")
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
        "joined",
        "muted_on",
        "left_on",
    )
    readonly_fields = fields
    joined = utc_column("joined_at", "joined")
    muted_on = utc_column("muted_at", "muted")
    left_on = utc_column("left_at", "left")
    actions = ("mute_members", "unmute_members", "remove_members")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Member]:
        return with_departures(super().get_queryset(request).select_related("room", "name"))

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
