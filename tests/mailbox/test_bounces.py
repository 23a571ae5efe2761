"""Notes nobody picked up bounce (SPEC §3.6): the bounce service, run directly.

``notes_bounce`` takes the time it runs at, so these tests move the clock by
passing a later ``now`` instead of waiting. Races with delivery are in
``test_bounce_races.py``; the sweep in a running server in
``tests/scale/test_bounces_in_the_server.py``.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from mailbox import services
from mailbox.models import Conversation, Note
from tests.conftest import client_for
from tests.factories import (
    AgentNameFactory,
    ProjectFactory,
    ProjectKeyFactory,
    SessionFactory,
    WorkspaceFactory,
)

pytestmark = pytest.mark.django_db

WEEK = timedelta(days=7)


def later(note: Note, by: timedelta) -> object:
    return note.created_at + by


def notice_of(note: Note) -> Note:
    return Note.objects.get(bounce_of=note.public_id)


def test_a_note_waiting_past_its_ttl_bounces_and_its_sender_gets_a_notice(workspace, alice):
    AgentNameFactory(handle="dave", workspace=workspace)
    note = services.note_leave(alice, to="dave", body="are you there?").note

    bounced = services.notes_bounce(now=later(note, WEEK + timedelta(seconds=1)))

    assert bounced == 1
    note.refresh_from_db()
    assert note.state == "bounced"
    assert note.bounced_at == note.delivered_at
    assert note.delivered_to is None
    notice = notice_of(note)
    assert notice.sender_name is None
    assert notice.sender_kind == "system"
    assert notice.recipient_id == alice.name_id
    assert notice.delivery == "name"
    assert notice.conversation_id == note.conversation_id
    assert notice.position == 2
    assert note.public_id in notice.body
    assert "to dave" in notice.body
    assert "7 days" in notice.body
    assert notice.state == "waiting"
    # A notice takes a position, not an exchange.
    thread = Conversation.objects.get(pk=note.conversation_id)
    assert (thread.notes_count, thread.last_position, thread.exchanges_left) == (1, 2, 19)


def test_a_note_within_its_ttl_stays_waiting(alice, bob):
    note = services.note_leave(alice, to="bob", body="soon").note

    assert services.notes_bounce(now=later(note, WEEK - timedelta(seconds=1))) == 0

    note.refresh_from_db()
    assert note.state == "waiting"
    assert not Note.objects.filter(bounce_of__isnull=False).exists()


def test_the_ttl_is_the_sender_projects(workspace, alice):
    brief = WorkspaceFactory(project=ProjectFactory(slug="brief", note_ttl=60), slug="main")
    hasty = SessionFactory(workspace=brief, name="hasty")
    services.optin_grant(workspace.project, source=brief.project, created_by="test")
    patient = services.note_leave(alice, to="next", body="whenever")
    rushed = services.note_leave(hasty, to="alice", body="now or never")
    now = later(rushed.note, timedelta(minutes=2))

    assert services.notes_bounce(now=now) == 1

    assert Note.objects.get(pk=rushed.note.pk).state == "bounced"
    assert Note.objects.get(pk=patient.note.pk).state == "waiting"


def test_bouncing_again_changes_nothing(alice):
    note = services.note_leave(alice, to="next", body="hand-over").note
    now = later(note, WEEK * 2)

    assert services.notes_bounce(now=now) == 1
    assert services.notes_bounce(now=now) == 0

    assert Note.objects.filter(bounce_of=note.public_id).count() == 1
    assert '"next" in workspace main' in notice_of(note).body


def test_many_overdue_notes_bounce_in_batches(alice):
    notes = [services.note_leave(alice, to="next", body=f"hand-over {i}").note for i in range(5)]

    assert services.notes_bounce(now=later(notes[-1], WEEK * 2), batch=2) == 5

    assert Note.objects.filter(bounced_at__isnull=False).count() == 5
    assert Note.objects.filter(bounce_of__isnull=False).count() == 5


def test_notices_in_one_thread_take_consecutive_positions_and_replies_follow(alice, bob):
    first = services.note_leave(alice, to="bob", body="one").note
    thread = first.conversation.public_id
    services.notes_claim(bob)
    services.note_leave(bob, conversation_id=thread, body="two")
    services.note_leave(alice, conversation_id=thread, body="three", to="next")
    services.note_leave(alice, conversation_id=thread, body="four", to="next")

    services.notes_bounce(now=timezone.now() + WEEK * 2)
    reply = services.note_leave(alice, conversation_id=thread, body="five", to="bob")

    rows = list(
        Note.objects.filter(conversation=first.conversation)
        .order_by("position")
        .values_list("position", "sender_kind", "bounce_of_id")
    )
    positions = [position for position, _, _ in rows]
    assert positions == list(range(1, 9))
    assert [kind for _, kind, _ in rows].count("system") == 3  # two, three and four bounced
    assert reply.note.position == 8
    assert reply.exchanges_left == 20 - 5


def test_a_bounced_note_is_never_delivered_and_its_sender_hears_of_it(workspace, alice):
    key = ProjectKeyFactory(project=workspace.project)
    note = services.note_leave(alice, to="next", body="for whoever comes").note
    services.notes_bounce(now=later(note, WEEK * 2))

    newcomer = services.session_start(key, workspace_slug="main", name="newcomer").session
    sent = client_for(alice).get("/api/v1/sessions/current/").json()["notes"]

    assert services.notes_claim(newcomer) == []
    [notice] = sent
    assert notice["from"] == {"name": "plumb", "workspace": None, "project": None, "kind": "system"}
    assert notice["bounce_of"] == note.public_id
    assert notice["to"] == "alice"
    assert notice["conversation_id"] == note.conversation.public_id
    assert notice["state"] == "delivered"
    assert notice["delivered_to"] == {"name": "alice", "kind": "agent"}
    history = client_for(alice).get(f"/api/v1/conversations/{note.conversation.public_id}/")
    states = [(n["state"], n["delivered_at"]) for n in history.json()["conversation"]["notes"]]
    assert states == [("bounced", None), ("delivered", notice["delivered_at"])]


def test_a_notice_nobody_picks_up_bounces_without_a_notice_of_its_own(alice):
    note = services.note_leave(alice, to="next", body="hand-over").note
    services.notes_bounce(now=later(note, WEEK * 2))
    notice = notice_of(note)

    assert services.notes_bounce(now=later(notice, WEEK * 2)) == 1

    notice.refresh_from_db()
    assert notice.state == "bounced"
    assert Note.objects.filter(sender_kind="system").count() == 1


def test_bounces_are_counted_for_metrics(alice, django_capture_on_commit_callbacks):
    from common import metrics

    before = metrics.NOTES_BOUNCED._value.get()
    note = services.note_leave(alice, to="next", body="hand-over").note

    with django_capture_on_commit_callbacks(execute=True):
        services.notes_bounce(now=later(note, WEEK * 2))

    assert metrics.NOTES_BOUNCED._value.get() == before + 1


@pytest.mark.sqlite  # SQLite's plan is fixed; PostgreSQL's is costed from statistics
def test_a_sweep_reads_the_pending_notes_alone_never_the_delivered_history():
    from mailbox.services.bounces import _overdue

    ProjectFactory(slug="brief", note_ttl=2)
    candidates = _overdue(timezone.now()).order_by().values_list("id", flat=True)[:100]
    sql, params = candidates.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
        plan = [row[3] for row in cursor.fetchall()]

    assert plan[0] == "SCAN mailbox_note USING INDEX note_pending_next", plan
