"""Projects and cross-project opt-ins in the admin: a project's collaboration
settings with its opt-ins inline, and the opt-ins' own list. Opt-ins are
granted and revoked through the services, never edited. Superusers and
operators only: the ``moderators`` group has no permission here (SPEC §5).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.contrib.admin import helpers
from django.contrib.admin.options import InlineModelAdmin
from django.db.models import Count, QuerySet
from django.forms import BaseInlineFormSet, ModelForm, TextInput
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from common.admin.actions import admin_actor
from common.admin.pages import ListTitleMixin, badge, utc_column
from mailbox import services
from mailbox.admin.base import FixedText, ServiceErrorsMixin, _adopt
from mailbox.errors import OptInNotFound
from mailbox.models import CrossProjectOptIn, Project
from mailbox.selectors import project_policy_use
from mailbox.services.identity import POLICY_SETTINGS


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
            # A select would list every project once per row; the source is
            # already loaded (select_related), so print it.
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
    # One empty row and a plain select: an opt-in can be granted without
    # JavaScript (inlines.js only adds the button for more rows).
    extra = 1
    fields = ("source", "note", "created_by", "created")
    readonly_fields = ("created_by", "created")
    created = utc_column("created_at", "granted")
    verbose_name = "opt-in"
    verbose_name_plural = "Accepts notes and room joins from (cross-project opt-ins)"
    add_text = "Add an opt-in"

    def get_queryset(self, request: HttpRequest) -> QuerySet[CrossProjectOptIn]:
        return super().get_queryset(request).select_related("project", "source")


class _OptInAdminFormSet(helpers.InlineAdminFormSet):
    """The opt-ins inline, whose add button (drawn by Django's inlines.js) says
    the inline's ``add_text`` instead of "Add another <verbose name>"."""

    def inline_formset_data(self) -> str:
        data = json.loads(super().inline_formset_data())
        data["options"]["addText"] = self.opts.add_text
        return json.dumps(data)


@admin.register(Project)
class ProjectAdmin(ListTitleMixin, ServiceErrorsMixin, admin.ModelAdmin):
    # The name under the slug, so that the list fits beside the sidebars of a
    # 1280px screen.
    list_display = (
        "slug_and_name",
        "mailbox",
        "max_exchanges",
        "accepts",
        "workspaces_count",
        "created",
        "notes_waiting_longest",
    )
    list_filter = ("mailbox_enabled", "accept_all_projects")
    search_fields = ("slug", "name")
    readonly_fields = ("created", "policy_use")
    inlines = (OptInInline,)
    created = utc_column("created_at", "created")
    fieldsets = (
        (
            "Identity",
            {
                "fields": ("slug", "name", "created"),
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
        (
            "Policy: caps, budgets and retention",
            {
                "fields": (
                    "policy_use",
                    "note_ttl",
                    "daily_note_budget",
                    "daily_message_budget",
                    "room_flood_limit",
                    "max_connected_sessions",
                    "retention_days",
                ),
                "description": (
                    "What this project's agents may do, and how long plumb keeps what they "
                    "wrote. 0 means none (no budget, no cap, keep everything). Budgets count "
                    "from 00:00 UTC; people posting from the admin are never counted or "
                    "paused. Every change is audited."
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

    @admin.display(description="project", ordering="slug")
    def slug_and_name(self, obj: Project) -> SafeString:
        name = format_html('<div class="plumb-muted plumb-small">{}</div>', obj.name)
        return format_html("{}{}", obj.slug, name if obj.name else "")

    # Words, not Django's boolean icons: a red cross reads as an error, and
    # neither setting being off is one.
    @admin.display(description="mailbox", ordering="mailbox_enabled")
    def mailbox(self, obj: Project) -> SafeString:
        return badge("on", "ok") if obj.mailbox_enabled else badge("off", "muted")

    @admin.display(description="accepts", ordering="accept_all_projects")
    def accepts(self, obj: Project) -> SafeString:
        if obj.accept_all_projects:
            return badge("all projects", "warn")
        return badge("its opt-ins", "muted")

    @admin.display(description="workspaces", ordering="workspace_total")
    def workspaces_count(self, obj: Project) -> int:
        return obj.workspace_total

    def get_inline_formsets(
        self,
        request: HttpRequest,
        formsets: list[BaseInlineFormSet],
        inline_instances: list[InlineModelAdmin],
        obj: Project | None = None,
    ) -> list[helpers.InlineAdminFormSet]:
        inline_formsets = super().get_inline_formsets(request, formsets, inline_instances, obj)
        for inline_formset in inline_formsets:
            if isinstance(inline_formset.opts, OptInInline):
                # Django builds the wrapper itself; the subclass changes one label.
                inline_formset.__class__ = _OptInAdminFormSet
        return inline_formsets

    @admin.display(description="notes")
    def notes_waiting_longest(self, obj: Project) -> SafeString:
        """The project's agents' notes still waiting, those closest to bouncing first."""
        query = urlencode({"state": "waiting", "project": obj.slug})
        url = reverse("admin:mailbox_note_changelist", current_app=self.admin_site.name)
        return format_html('<a href="{}?{}">waiting longest</a>', url, query)

    def get_readonly_fields(self, request: HttpRequest, obj: Project | None = None) -> tuple:
        # Keys, workspaces and clients refer to the slug; renaming would strand them.
        return ("slug", "created", "policy_use") if obj is not None else ("created", "policy_use")

    @admin.display(description="in use now")
    def policy_use(self, obj: Project) -> SafeString:
        """Each cap's use: today's budgets, sessions against the cap (and, from the
        rooms' admin, rooms paused now)."""
        if obj.pk is None:
            return format_html("{}", "-")
        items = format_html_join("", "<li>{}</li>", ((line,) for line in self.policy_lines(obj)))
        return format_html('<ul class="plumb-policy-use">{}</ul>', items)

    def policy_lines(self, obj: Project) -> list[SafeString]:
        use = project_policy_use(obj)
        sessions_url = reverse("admin:mailbox_session_changelist", current_app=self.admin_site.name)
        return [
            format_html(
                "Notes sent today (UTC): {} of {}",
                use.notes_used_today,
                use.daily_note_budget or "no budget",
            ),
            format_html(
                "Messages and reviews posted today (UTC): {} of {}",
                use.messages_used_today,
                use.daily_message_budget or "no budget",
            ),
            format_html(
                '<a href="{}?{}">Connected sessions</a>: {} of {}',
                sessions_url,
                urlencode({"project": obj.slug, "connected": "yes"}),
                use.connected,
                use.max_connected_sessions or "no cap",
            ),
        ]

    def save_model(self, request: HttpRequest, obj: Project, form: ModelForm, change: bool) -> None:
        data = form.cleaned_data
        if not change:
            created = services.project_create(
                data["slug"],
                name=data.get("name", ""),
                max_exchanges=data["max_exchanges"],
                mailbox_enabled=data["mailbox_enabled"],
                accept_all_projects=data["accept_all_projects"],
                note_ttl=data["note_ttl"],
                **{field: data[field] for field in POLICY_SETTINGS},
            )
            _adopt(obj, created)
            return
        # The form has already set the new values on obj; the service reads the
        # old ones from the database for the audit trail.
        editable = (
            "name",
            "max_exchanges",
            "mailbox_enabled",
            "accept_all_projects",
            "note_ttl",
            *POLICY_SETTINGS,
        )
        services.project_update(
            obj,
            actor=admin_actor(request),
            **{field: data[field] for field in editable if field in form.changed_data},
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
class CrossProjectOptInAdmin(ListTitleMixin, ServiceErrorsMixin, admin.ModelAdmin):
    list_display = ("project", "source", "created_by", "created", "note")
    list_filter = ("created_at",)
    list_select_related = ("project", "source")
    search_fields = ("project__slug", "source__slug", "created_by", "note")
    autocomplete_fields = ("project", "source")
    fields = ("project", "source", "note", "created_by", "created")
    readonly_fields = ("created_by", "created")
    created = utc_column("created_at", "granted")

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
