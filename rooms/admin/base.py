"""What the rooms' model admins share: view-only object pages, the yes/no and
slug filters, a member's state badges and links to filtered changelists.

Private to ``rooms.admin``; it imports the admin kit (``common.admin``) and the
rooms' models, never a sibling module.
"""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html_join
from django.utils.http import urlencode
from django.utils.safestring import SafeString
from django.utils.text import Truncator

from common.admin.pages import badge, slug_filter
from rooms.models import Member, Message


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


def _member_state(member: Member) -> SafeString:
    badges = []
    if member.left_at is not None:
        badges.append(badge("left", "muted"))
    if member.muted_at is not None:
        badges.append(badge("muted", "warn"))
    if not badges:
        badges.append(badge("member", "ok"))
    return format_html_join(" ", "{}", ((label,) for label in badges))
