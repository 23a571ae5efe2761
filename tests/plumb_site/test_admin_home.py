"""The admin home shows the system at a glance (plumb_site/admin.py, docs/operators.md "The admin").

A row per project and one for all: connected sessions, pending notes,
messages in the last hour and day, and an inline SVG chart of the last 24
hours, in a fixed number of queries. Moderators get the figures without
links to what they may not open. The figures themselves are checked in
``tests/rooms/test_activity.py``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse

from mailbox import services as mailbox_services
from plumb_site.admin import BAR_GAP, BAR_WIDTH, CHART_HEIGHT, HEADROOM, chart
from rooms import services as room_services
from tests.factories import ProjectFactory, SessionFactory, WorkspaceFactory

pytestmark = pytest.mark.django_db


def glance(response) -> str:
    """The panel's HTML."""
    page = response.content.decode()
    found = re.search(r'<section class="plumb-glance".*?</section>', page, re.S)
    assert found, "no glance panel on the page"
    return found.group(0)


def busy_project(slug: str, agents: int = 2, messages: int = 3, notes: int = 2) -> None:
    """A project with connected agents, a room with messages and pending notes."""
    workspace = WorkspaceFactory(project=ProjectFactory(slug=slug), slug="main")
    sessions = [SessionFactory(workspace=workspace, name=f"{slug}-{i}") for i in range(agents)]
    room_services.room_create(sessions[0], slug=f"{slug}-room")
    for _ in range(messages):
        room_services.message_send(sessions[0], f"{slug}-room", body="status")
    for _ in range(notes):
        mailbox_services.note_leave(sessions[0], body="for whoever comes next")


@pytest.fixture
def moderator_client(client, django_user_model):
    user = django_user_model.objects.create_user("mod", password="x", is_staff=True)
    user.groups.add(Group.objects.get(name="moderators"))
    client.force_login(user)
    return client


def test_the_home_shows_each_project_with_its_figures_and_chart(admin_client):
    busy_project("acme", agents=2, messages=3, notes=2)
    ProjectFactory(slug="quiet")

    response = admin_client.get(reverse("admin:index"))

    assert response.status_code == 200
    rows = response.context["glance"]["rows"]
    assert [row["figures"].slug for row in rows] == ["acme", "quiet"]
    acme = rows[0]["figures"]
    assert (acme.connected, acme.pending_notes) == (2, 2)
    assert (acme.messages_last_hour, acme.messages_last_day) == (3, 3)
    panel = glance(response)
    assert panel.count('<svg class="plumb-chart"') == 3  # two projects and the total
    assert 'aria-label="Messages and notes per hour over the last 24 hours: 3 messages' in panel
    assert "All projects" in panel


def test_the_chart_is_drawn_on_the_server_with_nothing_to_fetch(admin_client):
    busy_project("acme")

    panel = glance(admin_client.get(reverse("admin:index")))

    assert "<script" not in panel
    assert not re.search(r'(src|href)="(https?:)?//', panel)
    assert "<rect" in panel


def test_the_chart_caption_dates_its_first_hour(admin_client, monkeypatch):
    """At 01:06 the first of the last 24 hours began at 02:00 the day before: a bare
    "since 02:00" would read as a time still to come."""
    busy_project("acme")
    monkeypatch.setattr(
        "django.utils.timezone.now", lambda: datetime(2025, 12, 1, 1, 6, tzinfo=UTC)
    )

    panel = glance(admin_client.get(reverse("admin:index")))

    note = re.search(r'<p class="plumb-glance-note">(.*?)</p>', panel, re.S).group(1)
    assert "Last 24 hours, one bar per hour from 30 Nov 02:00 UTC to now" in note
    assert "<title>30 Nov 02:00 to 03:00 UTC: 0 messages, 0 notes</title>" in panel


def test_the_full_app_list_is_folded_under_all_models(admin_client):
    """The task cards come first; Django's app list opens on a click, without a script."""
    page = admin_client.get(reverse("admin:index")).content.decode()

    folded = re.search(r'<details class="plumb-all-models">\s*<summary>All models</summary>', page)
    assert folded
    assert page.index("plumb-start-wrap") < folded.start() < page.index('class="app-mailbox')


def test_operators_get_links_to_the_project_and_its_connected_sessions(admin_client):
    busy_project("acme")

    panel = glance(admin_client.get(reverse("admin:index")))

    assert 'href="/admin/mailbox/project/' in panel
    assert 'href="/admin/mailbox/session/?connected=yes&amp;project=acme"' in panel


def test_moderators_see_the_figures_and_no_link_to_what_they_may_not_open(moderator_client):
    busy_project("acme", agents=2, messages=3, notes=2)

    response = moderator_client.get(reverse("admin:index"))

    assert response.status_code == 200
    acme = response.context["glance"]["rows"][0]
    assert (acme["figures"].connected, acme["figures"].messages_last_day) == (2, 3)
    panel = glance(response)
    assert "/admin/mailbox/project/" not in panel
    assert "/admin/mailbox/session/" not in panel
    assert ">acme<" in panel.replace("\n", "").replace(" ", "")


def test_the_home_runs_a_fixed_number_of_queries_whatever_the_data(
    admin_client, django_assert_num_queries
):
    busy_project("acme", agents=1, messages=1, notes=1)
    admin_client.get(reverse("admin:index"))  # the login session's first look-ups
    # One of them is the header's unread count: a superuser takes part.
    with django_assert_num_queries(12) as small:
        admin_client.get(reverse("admin:index"))

    for slug in ("beta", "gamma", "delta"):
        busy_project(slug, agents=4, messages=12, notes=5)
    with django_assert_num_queries(12) as large:
        response = admin_client.get(reverse("admin:index"))

    assert len(response.context["glance"]["rows"]) == 4
    assert len(small.captured_queries) == len(large.captured_queries)


# --- the chart's geometry ------------------------------------------------------------------

HOURS = [datetime(2026, 12, 1, tzinfo=UTC) + timedelta(hours=h) for h in range(24)]


def test_bars_are_scaled_to_the_busiest_hour_and_stacked():
    messages = [0] * 24
    notes = [0] * 24
    messages[3], notes[3] = 20, 10  # the busiest hour: 30
    messages[10] = 15
    notes[23] = 1

    drawn = chart(messages, notes, HOURS)

    floor, usable = CHART_HEIGHT - 1, CHART_HEIGHT - 1 - HEADROOM
    busiest, half, tiny, idle = drawn.bars[3], drawn.bars[10], drawn.bars[23], drawn.bars[0]
    assert drawn.peak == 30
    assert busiest.messages_height + busiest.notes_height == usable
    assert busiest.notes_y + busiest.notes_height == busiest.messages_y
    assert busiest.messages_y + busiest.messages_height == floor
    assert half.messages_height == round(usable / 2)
    assert half.notes_height == 0
    assert (tiny.messages_height, tiny.notes_height) == (0, 1)  # never invisible
    assert (idle.messages_height, idle.notes_height) == (0, 0)
    assert [bar.x for bar in drawn.bars[:3]] == [0, BAR_WIDTH + BAR_GAP, 2 * (BAR_WIDTH + BAR_GAP)]
    assert drawn.width == 24 * (BAR_WIDTH + BAR_GAP) - BAR_GAP
    assert busiest.title == "1 Dec 03:00 to 04:00 UTC: 20 messages, 10 notes"
    assert tiny.title == "1 Dec 23:00 to 00:00 UTC: 0 messages, 1 note"


def test_an_hour_with_both_shows_both_however_small():
    messages, notes = [0] * 24, [0] * 24
    messages[0], notes[0] = 1, 1
    messages[1] = 1000

    bar = chart(messages, notes, HOURS).bars[0]

    assert (bar.messages_height, bar.notes_height) == (1, 1)


def test_an_idle_day_draws_no_bar():
    drawn = chart([0] * 24, [0] * 24, HOURS)

    assert drawn.peak == 0
    assert all(bar.messages_height == bar.notes_height == 0 for bar in drawn.bars)
