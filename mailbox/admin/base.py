"""What the identity admins (``projects``, ``keys``, ``workspaces``) share: saving
through the services and showing their errors, a fixed-text widget, the project
filters.

The admin only translates forms into service calls (STYLE: a rule written twice
is a bug waiting to happen), so the REST API, ``manage.py plumb`` and these
modules create keys, grant opt-ins and end sessions the same way. Django's
ModelForm validation catches the ordinary mistakes (bad slug, duplicate pair)
before a service runs; a service error that slips past it (a concurrent
duplicate) is shown as an error message instead of a 500.

It imports the admin kit (``common.admin``) and ``common.errors``, never a
sibling module.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.db.models import Model
from django.forms import Widget
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils.html import format_html
from django.utils.safestring import SafeString

from common.admin.pages import slug_filter
from common.errors import PlumbError


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


class FixedText(Widget):
    """Shows a value that cannot change, without a form control."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def render(
        self, name: str, value: Any, attrs: dict | None = None, renderer: Any = None
    ) -> SafeString:
        return format_html("<strong>{}</strong>", self.text)
