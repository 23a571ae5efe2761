"""The audit trail, read-only: who did what to which target, when and why.

Records are written by the services (from the admin and the ``plumb`` command
alike) and never changed here: no add, change or delete, for superusers too.
"""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from common.admin.pages import ListTitleMixin, badge, shortened, slug_filter, utc_column
from common.admin.paging import LargeTableAdminMixin
from mailbox.models import AuditRecord

# Every action a service records, for the filter: a fixed list costs no query,
# where Django's all-values filter would scan the table for distinct values.
KNOWN_ACTIONS = [
    ("key.create", "key created"),
    ("key.revoke", "key revoked"),
    ("optin.grant", "opt-in granted"),
    ("optin.revoke", "opt-in revoked"),
    ("room.hide", "message hidden"),
    ("room.unhide", "message unhidden"),
    ("room.mute", "member muted"),
    ("room.unmute", "member unmuted"),
    ("room.remove", "member removed"),
    ("room.lock", "room locked"),
    ("room.unlock", "room unlocked"),
    ("conversation.lock", "conversation locked"),
    ("conversation.unlock", "conversation unlocked"),
    ("session.end", "session ended"),
]


# Characters of a reason the list shows; the whole reason is in the cell's title
# and on the record's page.
REASON_SHOWN = 160

# Badge colours by verb: what takes something away is red, what gives it back green.
ACTION_KINDS = {
    "revoke": "danger",
    "hide": "danger",
    "mute": "warn",
    "remove": "danger",
    "lock": "danger",
    "grant": "ok",
    "create": "ok",
    "unhide": "ok",
    "unmute": "ok",
    "unlock": "ok",
    "end": "warn",
}


class ActionFilter(admin.SimpleListFilter):
    title = "action"
    parameter_name = "action"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple]:
        return KNOWN_ACTIONS

    def queryset(self, request: HttpRequest, queryset: QuerySet[AuditRecord]) -> QuerySet:
        value = self.value()
        return queryset.filter(action=value) if value else queryset


class ActorKindFilter(admin.SimpleListFilter):
    title = "from"
    parameter_name = "from"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple]:
        return [("admin", "the admin"), ("cli", "the command line")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[AuditRecord]) -> QuerySet:
        if self.value() in ("admin", "cli"):
            return queryset.filter(actor__startswith=f"{self.value()}:")
        return queryset


@admin.register(AuditRecord)
class AuditRecordAdmin(ListTitleMixin, LargeTableAdminMixin, admin.ModelAdmin):
    list_title = "Audit trail"
    # Four columns, so that the trail fits beside the sidebars of a 1280px
    # screen: who acted under what they did, where under what it was done to.
    list_display = ("when", "action_by", "target_where", "short_reason")
    list_display_links = ("when",)
    list_filter = (
        ActionFilter,
        ActorKindFilter,
        slug_filter("project", "project_slug", "project_slug"),
        slug_filter("room", "room_slug", "room_slug"),
    )
    # Slugs are stored as text on the record itself: searching needs no join,
    # and still finds records of projects and rooms that are gone.
    search_fields = ("project_slug", "room_slug", "actor", "target")
    search_help_text = "Project or room slug, actor (admin:alice, cli:root) or target."
    ordering = ("-created_at", "-id")
    fields = (
        "when",
        "actor",
        "action",
        "project_slug",
        "room_slug",
        "target",
        "reason",
    )
    readonly_fields = fields
    when = utc_column("created_at", "when", seconds=True)

    @admin.display(description="project · room", ordering="project_slug")
    def where(self, record: AuditRecord) -> str:
        room = f"#{record.room_slug}" if record.room_slug else ""
        return " · ".join(part for part in (record.project_slug, room) if part) or "-"

    @admin.display(description="action · by", ordering="action")
    def action_by(self, record: AuditRecord) -> SafeString:
        kind = ACTION_KINDS.get(record.action.rpartition(".")[2], "")
        return format_html(
            '{}<div class="plumb-muted plumb-small">by {}</div>',
            badge(record.action, kind),
            record.actor,
        )

    @admin.display(description="target · where", ordering="target")
    def target_where(self, record: AuditRecord) -> SafeString:
        return format_html(
            '{}<div class="plumb-muted plumb-small">{}</div>',
            record.target or "-",
            self.where(record),
        )

    @admin.display(description="reason")
    def short_reason(self, record: AuditRecord) -> SafeString | str:
        return shortened(record.reason, REASON_SHOWN) or "-"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: AuditRecord | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: AuditRecord | None = None) -> bool:
        return False
