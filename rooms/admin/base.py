"""What the rooms' model admins share: view-only object pages, the yes/no and
slug filters, a member's state (and how a member who is gone went) and links
to filtered changelists.

Private to ``rooms.admin``; it imports the admin kit (``common.admin``) and the
rooms' models, never a sibling module.
"""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Case, OuterRef, Q, QuerySet, Subquery, When
from django.db.models.fields.json import KT
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import SafeString
from django.utils.text import Truncator

from common.admin.pages import badge, slug_filter, utc_time
from rooms.models import Event, Member, Message


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


class RoomPausedFilter(admin.SimpleListFilter):
    """Rooms paused now by their flood limit (a pause past its time is over)."""

    title = "paused"
    parameter_name = "paused"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple]:
        return [("yes", "Paused now")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() == "yes":
            return queryset.filter(paused_until__gt=timezone.now())
        return queryset


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


def with_departures(members: QuerySet[Member]) -> QuerySet[Member]:
    """``members``, each one that is gone annotated with the event that ended its
    membership: ``departure_kind`` (``leave`` or ``moderation``) and
    ``departure_reason``.

    The room's stream is the one record of how a member went, and the
    transcript shows it; the member row only says when (``left_at``). Reading
    both pages from the stream keeps them saying the same thing: a member an
    operator removed, or whose project's opt-in was revoked, is "removed" with
    the reason in both, never "left" on one of them. Only the admin's pages
    need it, so it lives here, not in the selectors. The subqueries run for
    departed members only (the ``CASE``), each a backward walk of its room's
    ``(room, seq)`` index that stops at the latest matching event.
    """
    ending = (
        Event.objects.filter(room=OuterRef("room_id"))
        .annotate(member=KT("data__member"))
        .filter(
            Q(kind=Event.Kind.LEAVE, actor=OuterRef("name_id"))
            | Q(
                kind=Event.Kind.MODERATION,
                data__action="remove",
                member=OuterRef("name__handle"),
            )
        )
        .order_by("-seq")
    )
    reason = ending.annotate(reason=KT("data__reason")).values("reason")[:1]
    return members.annotate(
        departure_kind=Case(
            When(left_at__isnull=False, then=Subquery(ending.values("kind")[:1])),
        ),
        departure_reason=Case(When(left_at__isnull=False, then=Subquery(reason))),
    )


def _member_state(member: Member) -> SafeString:
    """Badges, and for a removed member the reason, as the transcript words it.

    ``member`` comes from :func:`with_departures`.
    """
    badges = []
    reason = ""
    if member.left_at is not None:
        if member.departure_kind == Event.Kind.MODERATION:
            badges.append(badge("removed", "danger"))
            reason = member.departure_reason or ""
        else:
            badges.append(badge("left", "muted"))
    if member.muted_at is not None:
        badges.append(badge("muted", "warn"))
    if not badges:
        badges.append(badge("member", "ok"))
    state = format_html_join(" ", "{}", ((label,) for label in badges))
    if member.left_at is None:
        return state
    return format_html(
        '{}{}<div class="plumb-muted plumb-small">{}</div>',
        state,
        format_html(' <span class="plumb-reason">&mdash; {}</span>', reason) if reason else "",
        utc_time(member.left_at),
    )
