"""The admin home's "at a glance" panel in a real browser: the chart is there, drawn.

A day of activity is stored through the services, oldest first, and dated
back hour by hour; the operator's and the moderator's home pages are then
loaded in chromium and photographed (to a temporary folder; the path is
printed) for people to look at.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from mailbox import services as mailbox_services
from mailbox.models import Note
from rooms import services as room_services
from rooms.models import Message
from tests.browser.conftest import log_in
from tests.factories import ProjectFactory, SessionFactory, WorkspaceFactory

pytestmark = pytest.mark.django_db(transaction=True)

# Messages and notes per hour, oldest hour first, for two projects.
ACME_MESSAGES = [2, 1, 0, 0, 0, 0, 1, 3, 6, 9, 12, 10, 8, 11, 14, 9, 7, 5, 4, 6, 8, 5, 3, 2]
ACME_NOTES = [0, 0, 0, 0, 0, 0, 0, 1, 1, 2, 1, 0, 2, 1, 3, 1, 0, 1, 0, 0, 1, 2, 0, 1]
PARTNER_MESSAGES = [0] * 12 + [1, 2, 2, 0, 0, 3, 1, 0, 0, 0, 1, 0]
PARTNER_NOTES = [0] * 14 + [1, 0, 0, 0, 1, 0, 0, 0, 0, 0]


def a_day_of_activity() -> None:
    now = timezone.now()
    this_hour = now.replace(minute=0, second=0, microsecond=0)
    projects = []
    for slug, name in (("acme", "Acme Robotics"), ("partner", "Partner Labs")):
        # A day compressed into seconds: no flood limit while it is seeded.
        project = ProjectFactory(slug=slug, name=name, room_flood_limit=0)
        workspace = WorkspaceFactory(project=project, slug="main")
        sender = SessionFactory(workspace=workspace, name=f"{slug}-lead")
        SessionFactory(workspace=workspace, name=f"{slug}-helper")
        room_services.room_create(sender, slug=f"{slug}-ops")
        projects.append(sender)
    ProjectFactory(slug="quiet", name="Quiet Corner")
    series = [
        (projects[0], ACME_MESSAGES, ACME_NOTES),
        (projects[1], PARTNER_MESSAGES, PARTNER_NOTES),
    ]
    # Hour by hour, so that rows are stored in the order of their dates.
    for hour in range(24):
        when = min(this_hour - timedelta(hours=23 - hour) + timedelta(minutes=5), now)
        for sender, messages, notes in series:
            slug = sender.workspace.project.slug
            for _ in range(messages[hour]):
                sent = room_services.message_send(sender, f"{slug}-ops", body="progress")
                Message.objects.filter(pk=sent.message.pk).update(created_at=when)
            for _ in range(notes[hour]):
                left = mailbox_services.note_leave(sender, body="hand-over")
                Note.objects.filter(pk=left.note.pk).update(created_at=when)


def test_the_operator_home_shows_each_project_at_a_glance(page: Page, superuser, tmp_path: Path):
    a_day_of_activity()

    log_in(page, "ops")

    panel = page.locator(".plumb-glance")
    expect(panel).to_be_visible()
    rows = panel.locator("tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.nth(0).locator("th")).to_contain_text("acme")
    charts = panel.locator("svg.plumb-chart")
    expect(charts).to_have_count(4)  # three projects and the total
    acme_chart = charts.nth(0)
    expect(acme_chart).to_be_visible()
    assert acme_chart.bounding_box()["width"] > 150
    # One bar group per hour, and a drawn bar for every hour acme was busy.
    expect(acme_chart.locator("g")).to_have_count(24)
    busy_hours = sum(1 for m, n in zip(ACME_MESSAGES, ACME_NOTES, strict=True) if m or n)
    drawn = acme_chart.locator("rect.plumb-chart-messages, rect.plumb-chart-notes")
    assert drawn.count() >= busy_hours
    expect(acme_chart).to_have_attribute("aria-label", f"{_label(ACME_MESSAGES, ACME_NOTES)}")
    project_link = rows.nth(0).locator("th a")
    expect(project_link).to_have_attribute(
        "href", re.compile(r"^/admin/mailbox/project/\d+/change/$")
    )
    path = tmp_path / "admin-home.png"
    page.screenshot(path=str(path), full_page=True)
    panel.screenshot(path=str(tmp_path / "admin-home-glance.png"))
    print(f"screenshots: {path}, {tmp_path / 'admin-home-glance.png'}")


def test_a_moderator_sees_the_figures_without_operator_links(page: Page, moderator, tmp_path):
    a_day_of_activity()

    log_in(page, "mod")

    panel = page.locator(".plumb-glance")
    expect(panel.locator("svg.plumb-chart")).to_have_count(4)
    expect(panel.locator("a[href^='/admin/mailbox/']")).to_have_count(0)
    expect(panel.locator("tbody tr").nth(0).locator("td").nth(0)).to_have_text("2")
    path = tmp_path / "admin-home-moderator.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")


def _label(messages: list[int], notes: list[int]) -> str:
    peak = max(m + n for m, n in zip(messages, notes, strict=True))
    return (
        f"Messages and notes per hour over the last 24 hours: {sum(messages)} messages"
        f" and {sum(notes)} notes; the busiest hour had {peak}."
    )
