"""Each project at a glance, for the admin home: who is connected, what waits, how busy.

Eight queries whatever the data, each grouped by project: projects (with
their caps), connected sessions, pending notes, notes bounced in the last 24
hours (by their sender's project; the partial index ``note_bounced`` holds
bounced notes only), today's budget counters, rooms paused now, then
messages and notes of the last 24 hours by hour. It lives in
``rooms`` because it reads both halves of plumb, and only ``rooms`` may
import ``mailbox``.

**Only the window is read.** Messages and notes grow without bound and
``created_at`` has no index (one per row would cost every send for the sake
of an admin page). Rows are stored in the order of their ``created_at``
(set in the transaction that inserts them), so the newest row older than
the window, found by walking the primary key backwards from the newest row,
bounds the window; the counts then read only the rows after it. A row stored
a few milliseconds out of order right at the window's far edge may be left
out, which a dashboard can live with.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import BigIntegerField, Count, Model, Q, Subquery, Value
from django.db.models.functions import Coalesce, TruncHour
from django.utils import timezone

from mailbox.models import DailyUsage, Note, Project, Session
from mailbox.services.budgets import budget_day
from rooms.models import Message, Room

HOURS = 24
# The caps read with each project.
_PROJECT_CAPS = ("max_connected_sessions", "daily_note_budget", "daily_message_budget")


@dataclass
class ProjectActivity:
    """One project's figures; ``*_by_hour`` run from 23 hours ago to the current hour."""

    pk: int | None
    slug: str
    name: str
    connected: int = 0
    pending_notes: int = 0
    bounced_last_day: int = 0
    messages_last_hour: int = 0
    messages_last_day: int = 0
    notes_last_day: int = 0
    messages_by_hour: list[int] = field(default_factory=lambda: [0] * HOURS)
    notes_by_hour: list[int] = field(default_factory=lambda: [0] * HOURS)
    # Its policy (SPEC §8) and each cap's use: 0 is "none" for a cap.
    max_connected_sessions: int = 0
    daily_note_budget: int = 0
    daily_message_budget: int = 0
    notes_used_today: int = 0
    messages_used_today: int = 0
    rooms_paused: int = 0

    def add(self, other: ProjectActivity) -> None:
        for name in (
            "connected",
            "pending_notes",
            "bounced_last_day",
            "messages_last_hour",
            "messages_last_day",
            "notes_last_day",
            "notes_used_today",
            "messages_used_today",
            "rooms_paused",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for mine, theirs in (
            (self.messages_by_hour, other.messages_by_hour),
            (self.notes_by_hour, other.notes_by_hour),
        ):
            for hour, count in enumerate(theirs):
                mine[hour] += count


@dataclass
class Activity:
    projects: list[ProjectActivity]
    total: ProjectActivity
    hours: list[datetime]  # the start of each chart hour, oldest first


def activity_by_project(now: datetime | None = None) -> Activity:
    """Every project's figures, by slug, and their sum."""
    now = now or timezone.now()
    this_hour = now.replace(minute=0, second=0, microsecond=0)
    hours = [this_hour - timedelta(hours=HOURS - 1 - i) for i in range(HOURS)]
    day_ago, hour_ago = now - timedelta(days=1), now - timedelta(hours=1)

    projects = {
        pk: ProjectActivity(
            pk=pk, slug=slug, name=name, **dict(zip(_PROJECT_CAPS, caps, strict=True))
        )
        for pk, slug, name, *caps in Project.objects.order_by("slug").values_list(
            "pk", "slug", "name", *_PROJECT_CAPS
        )
    }
    unknown = defaultdict(lambda: ProjectActivity(pk=None, slug="", name=""))

    def of(pk: int) -> ProjectActivity:
        # A project created since the first query is counted in the total only.
        return projects.get(pk) or unknown[pk]

    for pk, count in _grouped(Session.objects.connected(now), "workspace__project_id"):
        of(pk).connected = count
    pending = Note.objects.filter(delivered_at__isnull=True).annotate(
        # A note waits in the project of its recipient, or of the workspace it goes "next" in.
        project_id=Coalesce("recipient__workspace__project_id", "next_workspace__project_id")
    )
    for pk, count in _grouped(pending, "project_id"):
        of(pk).pending_notes = count
    bounced = Note.objects.filter(bounced_at__gte=day_ago, sender_name__isnull=False)
    for pk, count in _grouped(bounced, "sender_name__workspace__project_id"):
        of(pk).bounced_last_day = count

    used = DailyUsage.objects.filter(day=budget_day(now)).values_list("project_id", "what", "used")
    for pk, what, count in used:
        setattr(of(pk), f"{what}_used_today", count)
    for pk, count in _grouped(Room.objects.filter(paused_until__gt=now), "project_id"):
        of(pk).rooms_paused = count

    messages = (
        Message.objects.filter(_created_since(Message, day_ago))
        .annotate(hour=TruncHour("created_at"))
        .values_list("room__project_id", "hour")
        .annotate(count=Count("pk"), last_hour=Count("pk", filter=Q(created_at__gte=hour_ago)))
        .order_by()
    )
    for pk, hour, count, last_hour in messages:
        figures = of(pk)
        figures.messages_last_day += count
        figures.messages_last_hour += last_hour
        _add_to_hour(figures.messages_by_hour, hours[0], hour, count)

    notes = (
        Note.objects.filter(_created_since(Note, day_ago))
        .annotate(hour=TruncHour("created_at"))
        .values_list("sender_name__workspace__project_id", "hour")
        .annotate(count=Count("pk"))
        .order_by()
    )
    for pk, hour, count in notes:
        figures = of(pk)
        figures.notes_last_day += count
        _add_to_hour(figures.notes_by_hour, hours[0], hour, count)

    total = ProjectActivity(pk=None, slug="", name="")
    for figures in [*projects.values(), *unknown.values()]:
        total.add(figures)
    return Activity(projects=list(projects.values()), total=total, hours=hours)


def _grouped(queryset, key: str) -> list[tuple[int, int]]:
    return list(queryset.values_list(key).annotate(count=Count("pk")).order_by())


def _created_since(model: type[Model], cutoff: datetime) -> Q:
    """Rows created at or after ``cutoff``, bounded by primary key (see the module's doc)."""
    edge = model.objects.filter(created_at__lt=cutoff).order_by("-pk").values("pk")[:1]
    return Q(
        pk__gt=Coalesce(Subquery(edge), Value(0), output_field=BigIntegerField()),
        created_at__gte=cutoff,
    )


def _add_to_hour(by_hour: list[int], first: datetime, hour: datetime, count: int) -> None:
    """Add ``count`` to the chart's hour; the day's first, partial hour is not charted."""
    index = int((hour - first).total_seconds() // 3600)
    if 0 <= index < HOURS:
        by_hour[index] += count
