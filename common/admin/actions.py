"""Admin actions that ask why before they act, and the actor name the admin records.

A moderation action (hide a message, mute a member, lock a room or a thread)
changes what agents see, and the reason travels with it: into the room's stream
as a ``moderation`` event and into the audit trail. So the admin never runs one
straight from the action menu. Like Django's "delete selected", the first POST
answers with a confirmation page that lists the objects and asks for the
reason; the second POST runs the service once per object and says how many
changed.

Change pages reach the same confirmation with a small form that posts the
action for their one object (``common.admin.pages.ObjectToolsMixin``), so
there is a single code path from the admin to each moderation service.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme

from common import limits
from common.errors import PlumbError

CONFIRM_FIELD = "_plumb_reason_confirm"
NEXT_FIELD = "_plumb_next"
# The confirmation page names this many objects, then says how many more.
LISTED_OBJECTS = 50


def admin_actor(request: HttpRequest) -> str:
    """The actor every service call from the admin records: ``admin:<username>``.

    The command line records ``cli:<os user>``; the prefix tells the two front
    doors apart in the audit trail.
    """
    return f"admin:{request.user.get_username()}"


class ReasonForm(forms.Form):
    reason = forms.CharField(
        max_length=limits.REASON_MAX,
        strip=True,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 70, "autofocus": True}),
    )

    def __init__(self, *args: Any, required: bool, help_text: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["reason"]
        field.required = required
        field.help_text = help_text
        field.label = "Reason" if required else "Reason (optional)"
        field.error_messages["required"] = "Please say why: the reason is required."


class ActionsNeedChangeMixin:
    """Every plumb action changes state, and a changelist's POST is how one runs: a
    user who may only look (the ``participants`` group) is refused with 403, not
    shown the list again as if nothing had been asked."""

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if request.method == "POST" and not self.has_change_permission(request):
            raise PermissionDenied
        return super().changelist_view(request, extra_context)


def _safe_next(request: HttpRequest) -> str:
    """Where a change page's button asked to come back to, if it is a page of this site."""
    target = request.POST.get(NEXT_FIELD, "")
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return ""


def reason_action(
    *,
    description: str,
    title: str,
    apply: Callable[[Any, str, str], bool],
    done: str,
    unchanged: str,
    required: bool = True,
    help_text: str = "",
    button: str = "",
    select_related: tuple[str, ...] = (),
    describe: Callable[[Any], str] = str,
) -> Callable[[admin.ModelAdmin, HttpRequest, QuerySet], HttpResponse | None]:
    """Build an admin action that confirms with a reason, then calls ``apply`` per object.

    ``apply(obj, actor, reason)`` calls the service and returns whether the
    object changed (services change nothing, and record nothing, when the
    state is already in effect). ``done`` and ``unchanged`` are messages with
    ``{n}`` for the counts. A service refusal for one object is reported and
    the others go on. ``describe(obj)`` names an object on the confirmation page.
    """

    def action(
        model_admin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet
    ) -> HttpResponse | None:
        confirming = CONFIRM_FIELD in request.POST
        form = ReasonForm(
            request.POST if confirming else None, required=required, help_text=help_text
        )
        if confirming and form.is_valid():
            return _run(model_admin, request, queryset, form.cleaned_data["reason"])
        return _confirmation_page(model_admin, request, queryset, form)

    def _run(
        model_admin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet, reason: str
    ) -> HttpResponse | None:
        actor = admin_actor(request)
        changed = same = 0
        for obj in queryset.select_related(*select_related):
            try:
                if apply(obj, actor, reason):
                    changed += 1
                else:
                    same += 1
            except PlumbError as exc:
                model_admin.message_user(request, f"{describe(obj)}: {exc.message}", messages.ERROR)
        if changed or not same:
            model_admin.message_user(request, done.format(n=changed), messages.SUCCESS)
        if same:
            model_admin.message_user(request, unchanged.format(n=same), messages.WARNING)
        target = _safe_next(request)
        return HttpResponseRedirect(target) if target else None  # None: back to the changelist

    def _confirmation_page(
        model_admin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet, form: ReasonForm
    ) -> HttpResponse:
        opts = model_admin.model._meta
        select_across = request.POST.get("select_across") == "1"
        selected = request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
        listed = [
            describe(obj) for obj in queryset.select_related(*select_related)[:LISTED_OBJECTS]
        ]
        total = queryset.count() if select_across or len(selected) > LISTED_OBJECTS else len(listed)
        context = {
            **model_admin.admin_site.each_context(request),
            "title": title,
            "subtitle": None,
            "opts": opts,
            "form": form,
            "objects": listed,
            "total": total,
            "more": max(total - len(listed), 0),
            "selected": selected,
            "select_across": select_across,
            "action_name": request.POST.get("action", ""),
            "button": button or title,
            "confirm_field": CONFIRM_FIELD,
            "next_field": NEXT_FIELD,
            "next_url": _safe_next(request),
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "changelist_url": reverse(
                f"admin:{opts.app_label}_{opts.model_name}_changelist",
                current_app=model_admin.admin_site.name,
            ),
        }
        return TemplateResponse(request, "admin/plumb/reason_confirmation.html", context)

    return admin.action(description=description, permissions=["change"])(action)
