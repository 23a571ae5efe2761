"""plumb's admin site: Django's, with the system at a glance on its home page.

Installed through ``plumb_site.apps.PlumbAdminConfig``, so ``admin.site``
and every ``@admin.register`` in the apps are this site.

The home page's "at a glance" panel (``templates/admin/plumb/glance.html``)
has a row per project, and one for all of them: connected sessions, pending
notes, notes bounced in the last day, messages in the last hour and day,
and a chart of messages and notes per hour over the last 24 hours. The
figures come from ``rooms.activity`` (a fixed number of queries); this
module turns them into what the template draws: the bars of an inline SVG
chart (drawn on the server: no script, no file to fetch) and links only
where the user may follow them. Moderators see every figure, but no link to
projects or sessions, which they may not open.

People who take part (SPEC §5.1) have pages of their own here, under
``people/`` (their inbox, a thread, their handle, a page's refresh), and
every page's context carries their inbox link and unread count
(``plumb_inbox``, one query); the views are in ``rooms.admin.people``.

The login is Django's, with failed sign-ins counted per client address like
the API's failed credentials (``PLUMB_RATE_AUTH_FAIL``, see
``mailbox.throttles.AuthFailureThrottle``): past the rate the page
refuses every sign-in from that address with ``429`` and ``Retry-After``,
before any password is checked.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from rest_framework.exceptions import Throttled

from common.errors import retry_after
from mailbox.throttles import AuthFailureThrottle
from rooms.activity import Activity, ProjectActivity, activity_by_project

# The chart, in SVG user units (CSS pixels at the size it is drawn).
BAR_WIDTH = 7
BAR_GAP = 2
CHART_HEIGHT = 32
# Room above the tallest bar, so it does not touch the row's edge.
HEADROOM = 2


@dataclass(frozen=True)
class Bar:
    """One hour: its messages stacked under its notes."""

    x: int
    title: str
    messages_y: int
    messages_height: int
    notes_y: int
    notes_height: int


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    baseline: float  # the axis line's middle
    bars: list[Bar]
    peak: int
    label: str


class ThrottledLoginForm(AdminAuthenticationForm):
    """The admin's login form; a wrong username or password counts against the address."""

    throttled: Throttled | None = None

    def clean(self) -> dict[str, Any]:
        failures = AuthFailureThrottle()
        try:
            # Before authenticate(): a refused address gets no answer about
            # its password, and costs no password hashing.
            failures.check(self.request)
        except Throttled as refusal:
            self.throttled = refusal
            raise ValidationError(
                "Too many failed sign-ins from your address: try again in %(seconds)s s.",
                code="throttled",
                params={"seconds": retry_after(refusal.wait)},
            ) from None
        try:
            return super().clean()
        except ValidationError as error:
            # Only a username and password that were sent and did not match
            # a staff account: an empty field is no guess.
            if error.code == "invalid_login":
                failures.record(self.request)
            raise


class PlumbAdminSite(admin.AdminSite):
    login_form = ThrottledLoginForm

    def login(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """Django's login page, answered with ``429`` and ``Retry-After`` while refused."""
        response = super().login(request, extra_context)
        form = (getattr(response, "context_data", None) or {}).get("form")
        refusal = getattr(form, "throttled", None)
        if refusal is not None:
            response.status_code = 429
            response["Retry-After"] = str(retry_after(refusal.wait))
        return response

    def each_context(self, request: HttpRequest) -> dict[str, Any]:
        # Imported here: importing rooms.admin registers its models on this site.
        from rooms.admin import people

        return {**super().each_context(request), "plumb_inbox": people.header(request)}

    def get_urls(self) -> list:
        from rooms.admin import people

        pages = [
            ("people/inbox/", people.inbox_view, "people_inbox"),
            ("people/threads/<str:conversation_id>/", people.thread_view, "people_thread"),
            ("people/handle/", people.handle_view, "people_handle"),
            ("people/pulse/", people.pulse_view, "people_pulse"),
        ]
        return [
            path(route, self.admin_view(functools.partial(view, site=self)), name=name)
            for route, view, name in pages
        ] + super().get_urls()

    def index(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> TemplateResponse:
        """The home page, with each project's figures above the app list."""
        return super().index(request, {**glance_context(request), **(extra_context or {})})


def glance_context(request: HttpRequest) -> dict[str, Any]:
    """What the home page adds to its context: ``glance`` (see the module's doc)."""
    user = request.user
    activity = activity_by_project()
    may_open_projects = user.has_perm("mailbox.view_project")
    may_open_sessions = user.has_perm("mailbox.view_session")
    may_open_notes = user.has_perm("mailbox.view_note")
    rows = [
        _row(
            figures,
            activity,
            project_url=(
                reverse("admin:mailbox_project_change", args=[figures.pk])
                if may_open_projects
                else None
            ),
            sessions_url=(_sessions_url(project=figures.slug) if may_open_sessions else None),
            bounced_url=_bounced_url(project=figures.slug) if may_open_notes else None,
        )
        for figures in activity.projects
    ]
    total = _row(
        activity.total,
        activity,
        project_url=None,
        sessions_url=_sessions_url() if may_open_sessions else None,
        bounced_url=_bounced_url() if may_open_notes else None,
    )
    return {
        "glance": {
            "rows": rows,
            "total": total,
            "since": _hour_label(activity.hours[0]),
            "bar_width": BAR_WIDTH,
        }
    }


def _sessions_url(project: str | None = None) -> str:
    query = {"connected": "yes"} | ({"project": project} if project else {})
    return f"{reverse('admin:mailbox_session_changelist')}?{urlencode(query)}"


def _bounced_url(project: str | None = None) -> str:
    query = {"state": "bounced"} | ({"project": project} if project else {})
    return f"{reverse('admin:mailbox_note_changelist')}?{urlencode(query)}"


def _row(
    figures: ProjectActivity,
    activity: Activity,
    *,
    project_url: str | None,
    sessions_url: str | None,
    bounced_url: str | None = None,
) -> dict[str, Any]:
    return {
        "figures": figures,
        "project_url": project_url,
        "sessions_url": sessions_url,
        "bounced_url": bounced_url,
        "chart": chart(figures.messages_by_hour, figures.notes_by_hour, activity.hours),
    }


def chart(messages: list[int], notes: list[int], hours: list[datetime]) -> Chart:
    """Bars scaled to the busiest hour; an hour with anything in it is at least 1 unit tall."""
    peak = max((m + n for m, n in zip(messages, notes, strict=True)), default=0)
    floor = CHART_HEIGHT - 1  # the bottom unit is the axis line's
    usable = floor - HEADROOM
    bars = []
    for index, (hour, m, n) in enumerate(zip(hours, messages, notes, strict=True)):
        # Each of the two that is not zero keeps at least one unit.
        total_height = max(_scaled(m + n, peak, usable), (m > 0) + (n > 0))
        messages_height = min(_scaled(m, peak, usable), total_height - (1 if n else 0))
        notes_height = total_height - messages_height
        bars.append(
            Bar(
                x=index * (BAR_WIDTH + BAR_GAP),
                title=(
                    f"{_hour_label(hour)} to {(hour.hour + 1) % 24:02d}:00 UTC: "
                    f"{_count(m, 'message')}, {_count(n, 'note')}"
                ),
                messages_y=floor - messages_height,
                messages_height=messages_height,
                notes_y=floor - total_height,
                notes_height=notes_height,
            )
        )
    width = len(hours) * (BAR_WIDTH + BAR_GAP) - BAR_GAP
    label = (
        f"Messages and notes per hour over the last 24 hours: {_count(sum(messages), 'message')}"
        f" and {_count(sum(notes), 'note')}; the busiest hour had {peak}."
    )
    return Chart(
        width=width, height=CHART_HEIGHT, baseline=floor + 0.5, bars=bars, peak=peak, label=label
    )


def _hour_label(hour: datetime) -> str:
    """``1 Dec 02:00``: with its day, so that the first of the last 24 hours, which is
    later in the day than the current one, does not read as a time still to come."""
    hour = hour.astimezone(UTC)
    return f"{hour.day} {hour:%b %H}:00"


def _scaled(value: int, peak: int, usable: int) -> int:
    if value <= 0 or peak <= 0:
        return 0
    return max(1, round(value * usable / peak))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
