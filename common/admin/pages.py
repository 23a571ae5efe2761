"""Page furniture shared by plumb's model admins: tool buttons on change pages,
plain changelist titles, state badges, times with their zone and filters that
scale."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.contrib import admin
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.text import Truncator

from common.admin.actions import NEXT_FIELD


def badge(text: str, kind: str = "") -> SafeString:
    """A small rounded label; ``kind`` is ok, warn, danger, muted or mod."""
    css = f"plumb-badge plumb-badge-{kind}" if kind else "plumb-badge"
    return format_html('<span class="{}">{}</span>', css, text)


def shortened(text: str, limit: int) -> SafeString | str:
    """``text`` cut to ``limit`` characters, the whole of it in a title to hover for."""
    if len(text) <= limit:
        return text
    return format_html('<span title="{}">{}</span>', text, Truncator(text).chars(limit))


def utc_time(value: datetime | None, *, seconds: bool = False) -> SafeString | str:
    """``2025-12-01 02:05 UTC`` in a ``<time>`` element; the admin's "-" for no time.

    Every time the admin shows says its zone: a bare "02:00" on a page read
    from another zone is a different moment. The line may break between the
    date and the time, never inside either, which keeps list columns narrow.
    """
    if value is None:
        return "-"
    value = value.astimezone(UTC)
    clock = value.strftime("%H:%M:%S" if seconds else "%H:%M")
    return format_html(
        '<time datetime="{}" title="{}"><span class="plumb-nowrap">{}</span> '
        '<span class="plumb-nowrap">{}&nbsp;UTC</span></time>',
        value.isoformat(timespec="seconds"),
        value.strftime("%Y-%m-%d %H:%M:%S UTC"),
        value.strftime("%Y-%m-%d"),
        clock,
    )


def utc_column(
    field: str, description: str, *, seconds: bool = False
) -> Callable[[Any, Model], SafeString | str]:
    """A model admin column (or read-only field) showing ``field`` with :func:`utc_time`.

    Assign it to a class attribute and name that attribute in ``list_display``
    or ``fields``: ``started = utc_column("started_at", "started")``.
    """

    @admin.display(description=description, ordering=field)
    def column(model_admin: Any, obj: Model) -> SafeString | str:
        return utc_time(getattr(obj, field), seconds=seconds)

    return column


class ListTitleMixin:
    """A changelist titled with the plain plural ("Messages"), not "Select message to change"."""

    list_title = ""

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        title = self.list_title or str(self.opts.verbose_name_plural).capitalize()
        return super().changelist_view(request, {"title": title, **(extra_context or {})})


@dataclass(frozen=True)
class ToolButton:
    """A button among a change page's object tools.

    Either a link (``url``), or a reason action (``action``) posted for this one
    object, which leads to the same confirmation page as the changelist's menu.
    """

    label: str
    url: str = ""
    action: str = ""
    danger: bool = False


class ObjectToolsMixin:
    """Change pages with plumb's tool buttons (transcript links, moderation actions)."""

    change_form_template = "admin/plumb/change_form.html"

    def object_tools(self, request: HttpRequest, obj: Model) -> list[ToolButton]:
        return []

    def reason_tools(
        self, request: HttpRequest, choices: Iterable[tuple[str, str, bool]]
    ) -> list[ToolButton]:
        """Buttons for the reason actions (name, label, danger) this user may run."""
        allowed = self.get_actions(request)
        return [
            ToolButton(label=label, action=name, danger=danger)
            for name, label, danger in choices
            if name in allowed
        ]

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Model | None = None,
    ) -> HttpResponse:
        if obj is not None:
            opts = self.opts
            context["plumb_tools"] = self.object_tools(request, obj)
            context["plumb_changelist_url"] = reverse(
                f"admin:{opts.app_label}_{opts.model_name}_changelist",
                current_app=self.admin_site.name,
            )
            context["plumb_next_field"] = NEXT_FIELD
        return super().render_change_form(request, context, add, change, form_url, obj)


class SlugFilter(admin.SimpleListFilter):
    """A filter typed into a box: ``?project=acme`` keeps the rows of project ``acme``.

    Django's related-object filter lists every project (or room) in the sidebar,
    one query and one link each: with thousands of them the page is mostly
    sidebar. Subclasses set ``title``, ``parameter_name`` and ``lookup``.
    """

    template = "admin/plumb/slug_filter.html"
    lookup = ""
    placeholder = "slug"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple]:
        return []

    def has_output(self) -> bool:
        return True

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        value = (self.value() or "").strip()
        return queryset.filter(**{self.lookup: value}) if value else queryset

    def choices(self, changelist: Any) -> Iterator[dict[str, Any]]:
        yield {
            "parameter_name": self.parameter_name,
            "value": self.value() or "",
            "placeholder": self.placeholder,
            # The other filters and the search stay applied when this one changes.
            "hidden": [
                (name, value)
                for name, value in changelist.params.items()
                if name != self.parameter_name
            ],
            "clear_url": changelist.get_query_string(remove=[self.parameter_name]),
        }


def slug_filter(title: str, parameter_name: str, lookup: str) -> type[SlugFilter]:
    """A :class:`SlugFilter` for ``lookup`` (``"project__slug"``), shown as "By <title>"."""
    return type(
        f"{parameter_name.title()}SlugFilter",
        (SlugFilter,),
        {"title": title, "parameter_name": parameter_name, "lookup": lookup},
    )
