"""Caps and budgets at their edge under races that are made to happen (tests/races.py),
on both databases (SPEC §8): N racing calls let exactly as many through as the cap allows.

Each test holds the first call inside its transaction, past the statement that counts it,
while a second call at the same edge runs; the second must wait for the first and then be
refused. Without the fix named in each test, the second counts before the first commits and
both get through.
"""

from __future__ import annotations

import pytest

from mailbox import services
from mailbox.errors import BudgetExhausted, TooManySessions
from mailbox.models import DailyUsage, Note, Session
from rooms import services as room_services
from rooms.errors import RoomPaused
from rooms.models import Event, Message
from tests.factories import ProjectKeyFactory, SessionFactory, WorkspaceFactory
from tests.races import race

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def workspace():
    return WorkspaceFactory(slug="races")


def loaded(session: Session) -> Session:
    """The session as a request loads it, with its project's settings as they are now."""
    return Session.objects.select_related("name", "workspace__project").get(pk=session.pk)


def test_two_notes_racing_for_the_last_of_the_budget_let_one_through(workspace):
    """The fix: the conditional upsert (mailbox/services/budgets.py)."""
    services.project_update(workspace.project, actor="test", daily_note_budget=2)
    alice, _bob, carol, _dave = (
        SessionFactory(workspace=workspace, name=n) for n in ("alice", "bob", "carol", "dave")
    )
    services.note_leave(loaded(alice), body="first", to="bob")

    # Two senders, two recipients: nothing but the day's counter is shared.
    first, second, state = race(
        "budget.counted",
        lambda: services.note_leave(loaded(alice), body="one", to="bob"),
        lambda: services.note_leave(loaded(carol), body="two", to="dave", idempotency_key="k"),
    )

    assert first.outcome().note.body == "one"
    assert state == "blocked"
    with pytest.raises(BudgetExhausted) as refused:
        second.outcome()
    assert refused.value.details["used"] == 2
    assert Note.objects.count() == 2
    assert DailyUsage.objects.get().used == 2
    assert not Note.objects.filter(idempotency_key="k").exists()


def test_two_sends_racing_on_the_days_first_count_let_the_budget_through(workspace):
    """The day's counter row does not exist yet: the second upsert waits for the first's insert."""
    services.project_update(workspace.project, actor="test", daily_message_budget=1)
    alice = SessionFactory(workspace=workspace, name="alice")
    bob = SessionFactory(workspace=workspace, name="bob")
    room_services.room_create(loaded(alice), slug="lab")
    room_services.room_create(loaded(bob), slug="den")

    # Two rooms: no room lock is shared, only the day's counter.
    first, second, state = race(
        "budget.counted",
        lambda: room_services.message_send(loaded(alice), "lab", body="one"),
        lambda: room_services.message_send(loaded(bob), "den", body="two"),
    )

    assert first.outcome().message.body == "one"
    assert state == "blocked"
    with pytest.raises(BudgetExhausted):
        second.outcome()
    assert list(Message.objects.values_list("body", flat=True)) == ["one"]


def test_two_starts_racing_for_the_last_session_let_one_through(workspace):
    """The fix: the project row locked before the count (mailbox/services/sessions.py)."""
    services.project_update(workspace.project, actor="test", max_connected_sessions=2)
    one, other = (ProjectKeyFactory(project=workspace.project) for _ in range(2))
    SessionFactory(workspace=workspace, name="already")

    # Two keys: starts with one key queue on its row anyway; only the project's is shared.
    first, second, state = race(
        "session.started",
        lambda: services.session_start(one, workspace_slug="races", name="alice"),
        lambda: services.session_start(other, workspace_slug="races", name="bob"),
    )

    assert first.outcome().session.name.handle == "alice"
    assert state == "blocked"
    with pytest.raises(TooManySessions) as refused:
        second.outcome()
    assert refused.value.details == {"max_connected_sessions": 2, "connected": 2}
    assert Session.objects.filter(ended_at__isnull=True).count() == 2


def test_two_sends_racing_past_the_flood_limit_pause_the_room_once(workspace):
    """The fix: the count lives on the room row, written under the send's room lock."""
    services.project_update(workspace.project, actor="test", room_flood_limit=2)
    alice = SessionFactory(workspace=workspace, name="alice")
    bob = SessionFactory(workspace=workspace, name="bob")
    room_services.room_create(loaded(alice), slug="lab")
    room_services.room_join(loaded(bob), "lab")
    room_services.message_send(loaded(alice), "lab", body="zero")

    first, second, state = race(
        "send.locked",
        lambda: room_services.message_send(loaded(alice), "lab", body="one"),
        lambda: room_services.message_send(loaded(bob), "lab", body="two"),
    )

    assert first.outcome().message.body == "one"
    assert state == "blocked"
    with pytest.raises(RoomPaused):
        second.outcome()
    assert Message.objects.count() == 2
    assert [e.data["action"] for e in Event.objects.filter(kind="moderation")] == ["pause"]
