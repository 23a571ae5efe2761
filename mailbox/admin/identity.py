"""The operators' front door to the identity layer: projects, opt-ins, keys, workspaces,
agent names and sessions. Superusers and staff with these models' permissions
only: the ``moderators`` group has none of them (SPEC §5).

The admin only translates forms into service calls (STYLE: a rule written twice
is a bug waiting to happen), so the REST API, ``manage.py plumb`` and this module
create keys, grant opt-ins and end sessions the same way. Django's ModelForm
validation catches the ordinary mistakes (bad slug, duplicate pair) before a
service runs; a service error that slips past it (a concurrent duplicate) is
shown as an error message instead of a 500.
"""

from __future__ import annotations

import contextlib
from typing import Any

from django.contrib import admin, messages
from django.db.models import Count, Model, QuerySet
from django.forms import BaseInlineFormSet, ModelForm, TextInput, Widget
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from common.admin.actions import admin_actor
from common.admin.pages import slug_filter
from common.errors import PlumbError
from mailbox import services
from mailbox.errors import OptInNotFound
from mailbox.models import (
    AgentName,
    CrossProjectOptIn,
    Project,
    ProjectKey,
    Session,
    Workspace,
)


def _adopt(target: Model, created: Model) -> None:
    """Make the admin's unsaved instance stand for the row a service created.

    The admin keeps using the instance it built from the form (for inlines, the
    change message and the redirect), so it must carry the new row's values.
    """
    for field in created._meta.concrete_fields:
        setattr(target, field.attname, getattr(created, field.attname))
    target._state.adding = False
    target._state.db = created._state.db


class ServiceErrorsMixin:
    """Turn a domain error raised by a service during a save into an admin message.

    ``changeform_view`` wraps the save in ``transaction.atomic()``; catching here,
    outside it, means everything the request wrote has been rolled back.
    """

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except PlumbError as exc:
            self.message_user(request, exc.message, messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())


# Typed, not listed: a sidebar link per project does not scale.
ProjectFilter = slug_filter("project", "project", "project__slug")
WorkspaceProjectFilter = slug_filter("project", "project", "workspace__project__slug")


# --- projects and opt-ins -------------------------------------------------------------


class FixedText(Widget):
    """Shows a value that cannot change, without a form control."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def render(
        self, name: str, value: Any, attrs: dict | None = None, renderer: Any = None
    ) -> SafeString:
        return format_html("<strong>{}</strong>", self.text)


class OptInInlineForm(ModelForm):
    """Opt-ins are granted or revoked, never edited: existing rows are shown disabled."""

    class Meta:
        model = CrossProjectOptIn
        fields = ("source", "note")
        widgets = {"note": TextInput(attrs={"size": 40})}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            for field in self.fields.values():
                field.disabled = True
            # The autocomplete widget would query its selected project once per
            # row; the source is already loaded (select_related), so print it.
            self.fields["source"].widget = FixedText(str(self.instance.source))

    def clean(self) -> dict[str, Any]:
        # The inline's project is not one of this form's fields, so Django skips
        # the optin_not_self constraint; say it here rather than after the save.
        cleaned = super().clean()
        source = cleaned.get("source")
        if source is not None and source.pk == self.instance.project_id:
            self.add_error("source", "A project always accepts its own traffic.")
        return cleaned


class OptInInline(admin.TabularInline):
    model = CrossProjectOptIn
    fk_name = "project"
    form = OptInInlineForm
    extra = 0
    fields = ("source", "note", "created_by", "created_at")
    readonly_fields = ("created_by", "created_at")
    autocomplete_fields = ("source",)
    verbose_name = "accepts traffic from"
    verbose_name_plural = "Accepts notes and room joins from (cross-project opt-ins)"

    def get_queryset(self, request: HttpRequest) -> QuerySet[CrossProjectOptIn]:
        return super().get_queryset(request).select_related("project", "source")


@admin.register(Project)
class ProjectAdmin(ServiceErrorsMixin, admin.ModelAdmin):
    list_display = (
        "slug",
        "name",
        "mailbox_enabled",
        "max_exchanges",
        "accept_all_projects",
        "workspaces_count",
        "created_at",
    )
    list_filter = ("mailbox_enabled", "accept_all_projects")
    search_fields = ("slug", "name")
    readonly_fields = ("created_at",)
    inlines = (OptInInline,)
    fieldsets = (
        (
            "Identity",
            {
                "fields": ("slug", "name", "created_at"),
                "description": (
                    "The slug is how agents, keys and URLs name the project; it cannot "
                    "change once created."
                ),
            },
        ),
        (
            "Collaboration",
            {
                "fields": ("mailbox_enabled", "max_exchanges", "accept_all_projects"),
                "description": (
                    "Whether this project's sessions use the mailbox, how long a new "
                    "conversation may run, and whether any project may send notes here "
                    "and join its rooms. Otherwise only the projects listed below may."
                ),
            },
        ),
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Project]:
        # One aggregate query instead of a count per row. Meta.ordering does not
        # apply to GROUP BY queries: without order_by() the project autocomplete
        # (opt-in, key and workspace forms) pages an unordered queryset.
        return (
            super()
            .get_queryset(request)
            .annotate(workspace_total=Count("workspaces"))
            .order_by(*Project._meta.ordering)
        )

    @admin.display(description="workspaces", ordering="workspace_total")
    def workspaces_count(self, obj: Project) -> int:
        return obj.workspace_total

    def get_readonly_fields(self, request: HttpRequest, obj: Project | None = None) -> tuple:
        # Keys, workspaces and clients refer to the slug; renaming would strand them.
        return ("slug", "created_at") if obj is not None else ("created_at",)

    def save_model(self, request: HttpRequest, obj: Project, form: ModelForm, change: bool) -> None:
        data = form.cleaned_data
        if not change:
            created = services.project_create(
                data["slug"],
                name=data.get("name", ""),
                max_exchanges=data["max_exchanges"],
                mailbox_enabled=data["mailbox_enabled"],
                accept_all_projects=data["accept_all_projects"],
            )
            _adopt(obj, created)
            return
        editable = ("name", "max_exchanges", "mailbox_enabled", "accept_all_projects")
        services.project_update(
            obj, **{field: data[field] for field in editable if field in form.changed_data}
        )

    def save_formset(
        self, request: HttpRequest, form: ModelForm, formset: BaseInlineFormSet, change: bool
    ) -> None:
        if formset.model is not CrossProjectOptIn:
            super().save_formset(request, form, formset, change)
            return
        # commit=False fills new_objects/deleted_objects without touching the
        # database; the services then do the writes (and run their checks).
        formset.save(commit=False)
        project = form.instance
        for optin in formset.deleted_objects:
            with contextlib.suppress(OptInNotFound):  # already gone is the goal
                services.optin_revoke(project, source=optin.source, actor=admin_actor(request))
        formset.new_objects = [
            services.optin_grant(
                project,
                source=optin.source,
                created_by=admin_actor(request),
                note=optin.note,
            )
            for optin in formset.new_objects
        ]


@admin.register(CrossProjectOptIn)
class CrossProjectOptInAdmin(ServiceErrorsMixin, admin.ModelAdmin):
    list_display = ("project", "source", "created_by", "created_at", "note")
    list_filter = ("created_at",)
    list_select_related = ("project", "source")
    search_fields = ("project__slug", "source__slug", "created_by", "note")
    autocomplete_fields = ("project", "source")
    fields = ("project", "source", "note", "created_by", "created_at")
    readonly_fields = ("created_by", "created_at")

    def has_change_permission(
        self, request: HttpRequest, obj: CrossProjectOptIn | None = None
    ) -> bool:
        # Granted or revoked, never edited: an object page is view-only.
        if obj is not None:
            return False
        return super().has_change_permission(request, obj)

    def save_model(
        self, request: HttpRequest, obj: CrossProjectOptIn, form: ModelForm, change: bool
    ) -> None:
        granted = services.optin_grant(
            obj.project,
            source=obj.source,
            created_by=admin_actor(request),
            note=obj.note,
        )
        _adopt(obj, granted)

    def delete_model(self, request: HttpRequest, obj: CrossProjectOptIn) -> None:
        with contextlib.suppress(OptInNotFound):
            services.optin_revoke(obj.project, source=obj.source, actor=admin_actor(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[CrossProjectOptIn]) -> None:
        for optin in queryset.select_related("project", "source"):
            self.delete_model(request, optin)


# --- project keys ---------------------------------------------------------------------


class KeyStatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple]:
        return [("active", "Active"), ("revoked", "Revoked")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[ProjectKey]) -> QuerySet:
        if self.value() == "active":
            return queryset.filter(revoked_at__isnull=True)
        if self.value() == "revoked":
            return queryset.filter(revoked_at__isnull=False)
        return queryset


@admin.register(ProjectKey)
class ProjectKeyAdmin(ServiceErrorsMixin, admin.ModelAdmin):
    """Keys are issued (shown once), relabelled and revoked; never deleted or read back."""

    list_display = (
        "display_prefix",
        "project",
        "label",
        "created_at",
        "created_by",
        "last_used_at",
        "revoked",
    )
    list_filter = (KeyStatusFilter, ProjectFilter)
    list_select_related = ("project",)
    search_fields = ("prefix", "label", "project__slug", "created_by")
    autocomplete_fields = ("project",)
    actions = ("revoke_keys",)
    add_fields = ("project", "label")
    change_fields = (
        "display_prefix",
        "project",
        "label",
        "created_by",
        "created_at",
        "last_used_at",
        "revoked_at",
    )
    key_created_template = "admin/mailbox/projectkey/key_created.html"

    @admin.display(description="revoked", boolean=True, ordering="revoked_at")
    def revoked(self, obj: ProjectKey) -> bool:
        return obj.revoked_at is not None

    @admin.display(description="key prefix", ordering="prefix")
    def display_prefix(self, obj: ProjectKey) -> str:
        return obj.display_prefix

    def get_fields(self, request: HttpRequest, obj: ProjectKey | None = None) -> tuple:
        return self.change_fields if obj is not None else self.add_fields

    def get_readonly_fields(self, request: HttpRequest, obj: ProjectKey | None = None) -> tuple:
        if obj is None:
            return ()
        return tuple(field for field in self.change_fields if field != "label")

    def has_delete_permission(self, request: HttpRequest, obj: ProjectKey | None = None) -> bool:
        # Revocation keeps the row, so listings and audits can still name the key.
        return False

    def add_view(
        self, request: HttpRequest, form_url: str = "", extra_context: dict | None = None
    ) -> HttpResponse:
        # The add POST always answers with the key page; the other buttons would lie.
        extra_context = {
            **(extra_context or {}),
            "show_save_and_continue": False,
            "show_save_and_add_another": False,
        }
        return super().add_view(request, form_url, extra_context)

    def save_model(
        self, request: HttpRequest, obj: ProjectKey, form: ModelForm, change: bool
    ) -> None:
        if change:
            # update_fields: a plain save() would write back the revoked_at the form
            # loaded, un-revoking a key revoked while this page was open.
            obj.save(update_fields=["label"])
            return
        issued = services.key_create(obj.project, label=obj.label, created_by=admin_actor(request))
        _adopt(obj, issued.key)
        # Kept in memory for response_add only, which runs later in this same request.
        obj._raw_key_once = issued.raw

    def response_add(
        self, request: HttpRequest, obj: ProjectKey, post_url_continue: str | None = None
    ) -> HttpResponse:
        """Show the new key once, as the direct answer to the POST.

        Not a redirect plus a message: the messages framework keeps messages in
        a cookie or the session, which would store the secret.
        """
        raw_key = obj.__dict__.pop("_raw_key_once")
        opts = self.opts
        context = {
            **self.admin_site.each_context(request),
            "title": "New project key",
            "opts": opts,
            "key": obj,
            "raw_key": raw_key,
            "changelist_url": reverse(
                f"admin:{opts.app_label}_{opts.model_name}_changelist",
                current_app=self.admin_site.name,
            ),
            "add_url": reverse(
                f"admin:{opts.app_label}_{opts.model_name}_add",
                current_app=self.admin_site.name,
            ),
        }
        return TemplateResponse(request, self.key_created_template, context)

    @admin.action(description="Revoke selected keys", permissions=["change"])
    def revoke_keys(self, request: HttpRequest, queryset: QuerySet[ProjectKey]) -> None:
        revoked = 0
        for key in queryset.filter(revoked_at__isnull=True):
            services.key_revoke(key, actor=admin_actor(request))
            revoked += 1
        self.message_user(request, f"Revoked {revoked} key(s).", messages.SUCCESS)


# --- workspaces and names -------------------------------------------------------------


@admin.register(Workspace)
class WorkspaceAdmin(ServiceErrorsMixin, admin.ModelAdmin):
    list_display = ("slug", "project", "created_at")
    list_filter = (ProjectFilter,)
    list_select_related = ("project",)
    search_fields = ("slug", "project__slug")
    autocomplete_fields = ("project",)
    fields = ("project", "slug", "created_at")

    def get_readonly_fields(self, request: HttpRequest, obj: Workspace | None = None) -> tuple:
        # Agents configure the slug; sessions and names hang off the row.
        return ("project", "slug", "created_at") if obj is not None else ("created_at",)

    def save_model(
        self, request: HttpRequest, obj: Workspace, form: ModelForm, change: bool
    ) -> None:
        if change:
            return  # nothing is editable once created
        _adopt(obj, services.workspace_create(obj.project, slug=obj.slug))


@admin.register(AgentName)
class AgentNameAdmin(admin.ModelAdmin):
    """Names are claimed by session starts; adding one here reserves it for a workspace."""

    list_display = ("handle", "workspace", "project", "created_at")
    list_select_related = ("workspace__project",)
    search_fields = ("handle", "workspace__slug", "workspace__project__slug")
    list_filter = (WorkspaceProjectFilter,)
    autocomplete_fields = ("workspace",)
    fields = ("handle", "workspace", "created_at")

    @admin.display(description="project", ordering="workspace__project__slug")
    def project(self, obj: AgentName) -> Project:
        return obj.workspace.project

    def get_readonly_fields(self, request: HttpRequest, obj: AgentName | None = None) -> tuple:
        # Rebinding a name would split it from its sessions' denormalised workspace.
        return ("handle", "workspace", "created_at") if obj is not None else ("created_at",)


# --- sessions -------------------------------------------------------------------------


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
class SessionAdmin(admin.ModelAdmin):
    """Sessions are started by agents and ended here; never added, edited or deleted."""

    list_display = (
        "public_id",
        "handle",
        "workspace",
        "project",
        "started_at",
        "last_seen_at",
        "ended_at",
        "connected",
    )
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
        "started_at",
        "last_seen_at",
        "ended_at",
        "connected",
    )
    readonly_fields = fields

    @admin.display(description="name", ordering="name__handle")
    def handle(self, obj: Session) -> str:
        return obj.name.handle

    @admin.display(description="project", ordering="workspace__project__slug")
    def project(self, obj: Session) -> Project:
        return obj.workspace.project

    @admin.display(description="token prefix")
    def token(self, obj: Session) -> str:
        return f"plumb_tok_{obj.token_prefix}_…"

    @admin.display(description="connected", boolean=True)
    def connected(self, obj: Session) -> bool:
        return obj.is_connected(timezone.now())

    def get_queryset(self, request: HttpRequest) -> QuerySet[Session]:
        # The change page renders the name and workspace (with its project) too.
        return super().get_queryset(request).select_related("name", "workspace__project")

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
            services.session_end(session)
            ended += 1
        self.message_user(request, f"Ended {ended} session(s).", messages.SUCCESS)
