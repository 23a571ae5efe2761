"""Project keys in the admin: issued (the raw key shown once, as the answer to
the add form), relabelled and revoked; never deleted or read back. Superusers
and operators only: the ``moderators`` group has no permission here (SPEC §5).
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from common.admin.actions import admin_actor
from common.admin.pages import ListTitleMixin, badge, shortened, utc_column, utc_time
from mailbox import services
from mailbox.admin.base import ProjectFilter, ServiceErrorsMixin, _adopt
from mailbox.models import ProjectKey

# Characters of a label the list shows; the whole label is in the cell's title.
LABEL_SHOWN = 40


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
class ProjectKeyAdmin(ListTitleMixin, ServiceErrorsMixin, admin.ModelAdmin):
    """Keys are issued (shown once), relabelled and revoked; never deleted or read back."""

    # Five columns, so that the list fits beside the sidebars of a 1280px screen:
    # who created a key under when, and when an active key was last used under
    # its status.
    list_display = ("display_prefix", "project", "short_label", "issued", "status")
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
        "created",
        "last_used",
        "revoked_on",
    )
    key_created_template = "admin/mailbox/projectkey/key_created.html"
    created = utc_column("created_at", "created")
    last_used = utc_column("last_used_at", "last used")
    revoked_on = utc_column("revoked_at", "revoked")

    @admin.display(description="status", ordering="revoked_at")
    def status(self, obj: ProjectKey) -> SafeString:
        # Words, not Django's boolean icons: a red cross under "revoked" on
        # every active key read as an error.
        if obj.revoked_at is None:
            used = (
                format_html("used {}", utc_time(obj.last_used_at))
                if obj.last_used_at
                else "never used"
            )
            return format_html(
                '{}<div class="plumb-muted plumb-small">{}</div>', badge("active", "ok"), used
            )
        return format_html(
            '{}<div class="plumb-muted plumb-small">{}</div>',
            badge("revoked", "danger"),
            utc_time(obj.revoked_at),
        )

    @admin.display(description="label", ordering="label")
    def short_label(self, obj: ProjectKey) -> SafeString | str:
        return shortened(obj.label, LABEL_SHOWN) or "-"

    @admin.display(description="created", ordering="created_at")
    def issued(self, obj: ProjectKey) -> SafeString:
        by = format_html('<div class="plumb-muted plumb-small">by {}</div>', obj.created_by)
        return format_html("{}{}", utc_time(obj.created_at), by if obj.created_by else "")

    @admin.display(description="key prefix", ordering="prefix")
    def display_prefix(self, obj: ProjectKey) -> SafeString:
        # Breaks, where it must, after the part every key shares.
        return format_html("plumb_key_<wbr>{}", obj.prefix)

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
        revoked = ended = 0
        for key in queryset.filter(revoked_at__isnull=True):
            ended += services.key_revoke(key, actor=admin_actor(request))
            revoked += 1
        self.message_user(
            request,
            f"Revoked {revoked} key(s) and ended the {ended} open session(s) they started.",
            messages.SUCCESS,
        )
