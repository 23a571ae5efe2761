"""Workspaces, agent names and sessions in the admin: workspaces are created
through the services, names reserved for a workspace, sessions listed and
ended (never added, edited or deleted). Superusers and operators only: the
``moderators`` group has no permission here (SPEC §5).
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from common.admin.actions import admin_actor
from common.admin.pages import ListTitleMixin, badge, utc_column, utc_time
from mailbox import services
from mailbox.admin.base import (
    ProjectFilter,
    ServiceErrorsMixin,
    WorkspaceProjectFilter,
    _adopt,
)
from mailbox.errors import InvalidName
from mailbox.models import AgentName, Project, Session, Workspace

# --- workspaces and names -------------------------------------------------------------


@admin.register(Workspace)
class WorkspaceAdmin(ListTitleMixin, ServiceErrorsMixin, admin.ModelAdmin):
    list_display = ("slug", "project", "created")
    list_filter = (ProjectFilter,)
    list_select_related = ("project",)
    search_fields = ("slug", "project__slug")
    autocomplete_fields = ("project",)
    fields = ("project", "slug", "created")
    created = utc_column("created_at", "created")

    def get_readonly_fields(self, request: HttpRequest, obj: Workspace | None = None) -> tuple:
        # Agents configure the slug; sessions and names hang off the row.
        return ("project", "slug", "created") if obj is not None else ("created",)

    def save_model(
        self, request: HttpRequest, obj: Workspace, form: ModelForm, change: bool
    ) -> None:
        if change:
            return  # nothing is editable once created
        _adopt(obj, services.workspace_create(obj.project, slug=obj.slug))


class AgentNameForm(ModelForm):
    class Meta:
        model = AgentName
        fields = ("handle", "workspace")

    def clean_handle(self) -> str:
        # The session starts' own rule, so the admin cannot claim "next" either.
        try:
            return services.handle_check(self.cleaned_data["handle"], field="handle")
        except InvalidName as exc:
            raise ValidationError(exc.details["handle"]) from None


@admin.register(AgentName)
class AgentNameAdmin(ListTitleMixin, admin.ModelAdmin):
    """Names are claimed by session starts; adding one here reserves it for a workspace."""

    form = AgentNameForm

    list_display = ("handle", "workspace", "project", "created")
    list_select_related = ("workspace__project",)
    search_fields = ("handle", "workspace__slug", "workspace__project__slug")
    list_filter = (WorkspaceProjectFilter,)
    autocomplete_fields = ("workspace",)
    fields = ("handle", "workspace", "created")
    created = utc_column("created_at", "created")

    @admin.display(description="project", ordering="workspace__project__slug")
    def project(self, obj: AgentName) -> Project:
        return obj.workspace.project

    def get_readonly_fields(self, request: HttpRequest, obj: AgentName | None = None) -> tuple:
        # Rebinding a name would split it from its sessions' denormalised workspace.
        return ("handle", "workspace", "created") if obj is not None else ("created",)


# --- sessions -------------------------------------------------------------------------

# How a session ended, in a badge's few words.
END_WORDS = {
    Session.EndReason.ENDED: "ended",
    Session.EndReason.EXPIRED: "expired",
    Session.EndReason.KEY_REVOKED: "key revoked",
    Session.EndReason.PERSON: "a person's",
}


class ConnectedFilter(admin.SimpleListFilter):
    title = "connected"
    parameter_name = "connected"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple]:
        return [("yes", "Yes"), ("no", "No")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Session]) -> QuerySet:
        # One definition of "connected": the model's queryset method.
        if self.value() == "yes":
            return queryset.connected()
        if self.value() == "no":
            return queryset.exclude(pk__in=Session.objects.connected().values("pk"))
        return queryset


@admin.register(Session)
class SessionAdmin(ListTitleMixin, admin.ModelAdmin):
    """Sessions are started by agents and ended here; never added, edited or deleted."""

    # Five columns, so that the list fits beside the sidebars of a 1280px screen:
    # the workspace (which names its project) under the name, and whether the
    # session is connected, or how and when it ended, in one "state".
    list_display = ("public_id", "holder", "started", "last_seen", "state")
    list_filter = (ConnectedFilter, WorkspaceProjectFilter)
    list_select_related = ("name", "workspace__project")
    search_fields = ("public_id", "name__handle", "workspace__slug", "workspace__project__slug")
    actions = ("end_sessions",)
    fields = (
        "public_id",
        "name",
        "workspace",
        "project",
        "token",
        "started",
        "last_seen",
        "ended",
        "end_reason",
        "project_key",
        "connected",
    )
    readonly_fields = fields
    started = utc_column("started_at", "started")
    last_seen = utc_column("last_seen_at", "last seen")
    ended = utc_column("ended_at", "ended")

    @admin.display(description="name · workspace", ordering="name__handle")
    def holder(self, obj: Session) -> SafeString:
        return format_html(
            '{}<div class="plumb-muted plumb-small">{}</div>', obj.name.handle, obj.workspace
        )

    @admin.display(description="project", ordering="workspace__project__slug")
    def project(self, obj: Session) -> Project:
        return obj.workspace.project

    @admin.display(description="state", ordering="ended_at")
    def state(self, obj: Session) -> SafeString:
        if obj.ended_at is None:
            if obj.is_connected(timezone.now()):
                return badge("connected", "ok")
            return badge("not connected", "muted")
        # The short word in the badge, the model's whole sentence on hover.
        return format_html(
            '<span title="{}">{}</span><div>{}</div>',
            obj.get_end_reason_display() or "ended",
            badge(END_WORDS.get(obj.end_reason, "ended"), "muted"),
            utc_time(obj.ended_at),
        )

    @admin.display(description="token prefix")
    def token(self, obj: Session) -> str:
        return f"plumb_tok_{obj.token_prefix}_…"

    @admin.display(description="connected", boolean=True)
    def connected(self, obj: Session) -> bool:
        return obj.is_connected(timezone.now())

    def get_queryset(self, request: HttpRequest) -> QuerySet[Session]:
        # The change page renders the name, workspace (with its project) and key too.
        return (
            super()
            .get_queryset(request)
            .select_related("name", "workspace__project", "project_key")
        )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Session | None = None) -> bool:
        # Change permission gates the "end" action; an object page is view-only.
        if obj is not None:
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Session | None = None) -> bool:
        # Notes record which session received them; end a session instead.
        return False

    @admin.action(description="End selected sessions", permissions=["change"])
    def end_sessions(self, request: HttpRequest, queryset: QuerySet[Session]) -> None:
        ended = 0
        for session in queryset.filter(ended_at__isnull=True):
            services.session_end(session, actor=admin_actor(request))
            ended += 1
        self.message_user(request, f"Ended {ended} session(s).", messages.SUCCESS)
