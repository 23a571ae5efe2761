"""Each project at a glance (rooms.activity): the admin home's figures, exactly.

Rows are stored through the services, oldest first, then dated back: the
window is bounded by primary key on the promise that rows are stored in the
order of their ``created_at``, and the data keeps it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from mailbox import services as mailbox_services
from mailbox.models import Note, Session
from rooms import services as room_services
from rooms.activity import HOURS, activity_by_project
from rooms.models import Message
from tests.factories import ProjectFactory, SessionFactory, WorkspaceFactory

pytestmark = pytest.mark.django_db


@dataclass
class World:
    now: datetime
    this_hour: datetime


def dated(row: Message | Note, when: datetime) -> None:
    type(row).objects.filter(pk=row.pk).update(created_at=when)


def send(session: Session, slug: str, when: datetime) -> None:
    dated(room_services.message_send(session, slug, body="status").message, when)


def leave(session: Session, when: datetime, to: str | None = None) -> None:
    dated(mailbox_services.note_leave(session, body="hand-over", to=to).note, when)


@pytest.fixture
def world() -> World:
    """Two projects, acme (alice, bob; room ops) and partner (carol; room lab).

    acme's messages: one 24 h and a minute ago (outside the day), one at the
    start of the chart's first hour, three five hours before the current
    hour, two at its start. Notes: bob to alice 3 h before (delivered),
    alice to bob 2 h before and alice to "next" 1 h before (both pending),
    carol to "next" in partner at the start of the current hour (pending).
    """
    now = timezone.now()
    this_hour = now.replace(minute=0, second=0, microsecond=0)
    acme = WorkspaceFactory(project=ProjectFactory(slug="acme", name="Acme"), slug="main")
    partner = WorkspaceFactory(project=ProjectFactory(slug="partner", name=""), slug="main")
    ProjectFactory(slug="quiet")
    alice = SessionFactory(workspace=acme, name="alice")
    bob = SessionFactory(workspace=acme, name="bob")
    carol = SessionFactory(workspace=partner, name="carol")
    mailbox_services.session_end(SessionFactory(workspace=acme, name="dave"))
    eve = SessionFactory(workspace=partner, name="eve")
    Session.objects.filter(pk=eve.pk).update(last_seen_at=now - timedelta(minutes=10))

    room_services.room_create(alice, slug="ops")
    room_services.room_create(carol, slug="lab")
    send(alice, "ops", now - timedelta(hours=24, minutes=1))
    send(alice, "ops", this_hour - timedelta(hours=23))
    for _ in range(3):
        send(alice, "ops", this_hour - timedelta(hours=5))
    send(carol, "lab", this_hour - timedelta(hours=1))
    send(alice, "ops", this_hour)
    send(alice, "ops", this_hour)

    leave(bob, this_hour - timedelta(hours=3), to="alice")
    leave(alice, this_hour - timedelta(hours=2), to="bob")
    leave(alice, this_hour - timedelta(hours=1))
    leave(carol, this_hour)
    assert [n.body for n in mailbox_services.notes_claim(alice)] == ["hand-over"]
    return World(now=now, this_hour=this_hour)


def hours(**counts: int) -> list[int]:
    """A 24-hour series from ``h0`` (the chart's first hour) to ``h23`` (the current one)."""
    series = [0] * HOURS
    for name, count in counts.items():
        series[int(name[1:])] = count
    return series


def test_each_project_gets_its_connected_pending_and_recent_figures(world):
    activity = activity_by_project(world.now)

    by_slug = {figures.slug: figures for figures in activity.projects}
    assert list(by_slug) == ["acme", "partner", "quiet"]
    acme, partner, quiet = by_slug.values()
    # dave ended his session; eve's expired ten minutes ago.
    assert (acme.connected, partner.connected, quiet.connected) == (2, 1, 0)
    assert (acme.pending_notes, partner.pending_notes, quiet.pending_notes) == (2, 1, 0)
    assert (acme.messages_last_hour, acme.messages_last_day) == (2, 6)
    assert (partner.messages_last_hour, partner.messages_last_day) == (0, 1)
    assert (acme.notes_last_day, partner.notes_last_day) == (3, 1)
    assert acme.messages_by_hour == hours(h0=1, h18=3, h23=2)
    assert acme.notes_by_hour == hours(h20=1, h21=1, h22=1)
    assert partner.messages_by_hour == hours(h22=1)
    assert partner.notes_by_hour == hours(h23=1)
    assert quiet.messages_by_hour == quiet.notes_by_hour == hours()


def test_the_total_adds_every_project_up(world):
    total = activity_by_project(world.now).total

    assert (total.connected, total.pending_notes) == (3, 3)
    assert (total.messages_last_hour, total.messages_last_day, total.notes_last_day) == (2, 7, 4)
    assert total.messages_by_hour == hours(h0=1, h18=3, h22=1, h23=2)
    assert total.notes_by_hour == hours(h20=1, h21=1, h22=1, h23=1)


def test_the_chart_hours_end_with_the_current_one(world):
    activity = activity_by_project(world.now)

    assert activity.hours[-1] == world.this_hour
    assert activity.hours[0] == world.this_hour - timedelta(hours=HOURS - 1)


def test_eight_queries_whatever_the_data(world, django_assert_num_queries):
    with django_assert_num_queries(8):
        activity_by_project(world.now)
    partner = WorkspaceFactory(project=ProjectFactory(slug="more"), slug="main")
    sessions = [SessionFactory(workspace=partner, name=f"agent-{i}") for i in range(5)]
    room_services.room_create(sessions[0], slug="busy")
    for session in sessions:
        leave(session, timezone.now())
        send(sessions[0], "busy", timezone.now())

    with django_assert_num_queries(8):
        activity = activity_by_project()
    assert activity.total.messages_last_day == 12


def test_the_day_is_read_from_the_newest_rows_back_not_by_scanning(world):
    with CaptureQueriesContext(connection) as captured:
        activity_by_project(world.now)
    trunc = "django_datetime_trunc" if connection.vendor == "sqlite" else "DATE_TRUNC"
    windowed = [q["sql"] for q in captured.captured_queries if trunc in q["sql"]]
    assert len(windowed) == 2  # messages, notes
    for sql in windowed:
        with transaction.atomic(), connection.cursor() as cursor:
            if connection.vendor == "sqlite":
                cursor.execute(f"EXPLAIN QUERY PLAN {sql}")
                plan = [row[-1] for row in cursor.fetchall()]
                # The outer rows by primary-key range, from the edge the subquery found.
                assert any("USING INTEGER PRIMARY KEY (rowid>?)" in step for step in plan), plan
            else:
                # A table this small is scanned whatever the indexes; with scans
                # priced out, the plan shows what the query lets PostgreSQL use:
                # the edge found backwards along the primary key, and the rows
                # bounded by it (which index reads them is the planner's choice).
                cursor.execute("SET LOCAL enable_seqscan = off")
                cursor.execute(f"EXPLAIN {sql}")
                plan = "\n".join(row[0] for row in cursor.fetchall())
                assert re.search(r"Index Scan Backward using \w+_pkey", plan), plan
                assert "(id > COALESCE(" in plan, plan
