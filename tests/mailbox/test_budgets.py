"""Daily budgets of notes and of room messages and reviews (SPEC §8), at both doors."""

from __future__ import annotations

from datetime import UTC, datetime
from unittest import mock

import pytest
from django.utils import timezone

from mailbox import services
from mailbox.models import AuthorKind, DailyUsage, Note, Project, Session
from mailbox.representation import timestamp
from mailbox.services.budgets import budget_resets_at
from rooms import services as room_services
from rooms.models import Event, Message
from tests.conftest import assert_error, client_for
from tests.doors import DOORS, call

pytestmark = pytest.mark.django_db

NOTES = "/api/v1/notes/"


def set_policy(project: Project, **values: int) -> None:
    services.project_update(project, actor="test", **values)


def fresh(session: Session) -> Session:
    """The session as a request would load it, with its project's current settings."""
    loaded = Session.objects.select_related("name", "workspace__project").get(pk=session.pk)
    loaded.raw_token = session.raw_token
    return loaded


@pytest.fixture
def room(alice, bob):
    room_services.room_create(alice, slug="lab")
    room_services.room_join(bob, "lab")
    return "lab"


@pytest.mark.parametrize("door", DOORS)
def test_notes_past_the_daily_budget_are_refused_with_budget_used_and_reset(
    door, alice, bob, project
):
    set_policy(project, daily_note_budget=2)
    for i in range(2):
        status, _ = call(door, alice, "leave_note", NOTES, {"body": f"n{i}", "to": "bob"})
        assert status in (200, 201)

    status, body = call(door, alice, "leave_note", NOTES, {"body": "third", "to": "bob"})

    assert status in (429, None)
    assert body["error"]["code"] == "budget_exhausted"
    assert body["error"]["details"] == {
        "budget": 2,
        "used": 2,
        "resets_at": timestamp(budget_resets_at(timezone.now())),
    }
    assert Note.objects.filter(body="third").count() == 0
    assert DailyUsage.objects.get(project=project, what="notes").used == 2


def test_a_refusal_says_when_to_retry_and_resets_at_midnight_utc(alice, bob, project):
    set_policy(project, daily_note_budget=1)
    late = datetime(2026, 12, 1, 23, 59, 30, tzinfo=UTC)
    with mock.patch("django.utils.timezone.now", return_value=late):
        assert (
            client_for(alice).post(NOTES, {"body": "a", "to": "bob"}, format="json").status_code
            == 201
        )
        response = client_for(alice).post(NOTES, {"body": "b", "to": "bob"}, format="json")
    error = assert_error(response, 429, "budget_exhausted")
    assert error["details"]["resets_at"] == "2026-12-02T00:00:00.000000Z"
    assert 1 <= int(response["Retry-After"]) <= 31

    with mock.patch(
        "django.utils.timezone.now", return_value=late.replace(day=2, hour=0, second=1)
    ):
        response = client_for(alice).post(NOTES, {"body": "b", "to": "bob"}, format="json")
    assert response.status_code == 201, "a new UTC day has the whole budget"


def test_a_refused_note_keeps_its_idempotency_key_usable(alice, bob, project):
    set_policy(project, daily_note_budget=1)
    services.note_leave(fresh(alice), body="first", to="bob")
    sent = {"body": "retried", "to": "bob", "idempotency_key": "k1"}

    assert_error(client_for(alice).post(NOTES, sent, format="json"), 429, "budget_exhausted")
    assert not Note.objects.filter(idempotency_key="k1").exists()

    set_policy(project, daily_note_budget=2)
    assert client_for(alice).post(NOTES, sent, format="json").status_code == 201
    replay = client_for(alice).post(NOTES, sent, format="json")
    assert (replay.status_code, replay.json()["replayed"]) == (200, True)
    assert DailyUsage.objects.get(project=project, what="notes").used == 2


def test_a_note_refused_for_another_reason_takes_nothing_from_the_budget(alice, project):
    set_policy(project, daily_note_budget=1)
    response = client_for(alice).post(NOTES, {"body": "x", "to": "nobody"}, format="json")
    assert_error(response, 404, "recipient_not_found")
    assert not DailyUsage.objects.filter(project=project).exists()


@pytest.mark.parametrize("door", DOORS)
def test_messages_and_reviews_share_the_daily_message_budget(door, alice, bob, project, room):
    first = room_services.message_send(bob, room, body="to review").message
    set_policy(project, daily_message_budget=2)
    path = f"/api/v1/rooms/{room}/messages/"

    status, _ = call(door, alice, "send_message", path, {"body": "one"})
    assert status in (200, 201)
    review = f"{path}{first.public_id}/reviews/"
    status, _ = call(door, alice, "review_message", review, {"verdict": "approve"})
    assert status in (200, 201)
    status, body = call(door, alice, "send_message", path, {"body": "three"})

    assert status in (429, None)
    assert body["error"]["code"] == "budget_exhausted"
    assert body["error"]["details"]["budget"] == 2
    assert body["error"]["details"]["used"] == 2
    status, body = call(door, bob, "review_message", review, {"verdict": "comment"})
    assert body["error"]["code"] == "budget_exhausted", "the budget is the project's, not alice's"
    assert not Message.objects.filter(body="three").exists()
    assert Event.objects.filter(kind="review").count() == 1


def test_a_refused_send_keeps_its_idempotency_key_usable(alice, project, room):
    set_policy(project, daily_message_budget=1)
    room_services.message_send(fresh(alice), room, body="first")
    sent = {"body": "again", "idempotency_key": "s1"}
    path = f"/api/v1/rooms/{room}/messages/"
    head = room_services.events_read(alice, room, after_seq=0).latest_seq

    assert_error(client_for(alice).post(path, sent, format="json"), 429, "budget_exhausted")
    assert not Message.objects.filter(idempotency_key="s1").exists()
    assert room_services.events_read(alice, room, after_seq=0).latest_seq == head

    set_policy(project, daily_message_budget=0)
    assert client_for(alice).post(path, sent, format="json").status_code == 201


def test_plumbs_own_notices_are_not_counted(alice, bob, project, settings):
    set_policy(project, daily_note_budget=1)
    services.note_leave(fresh(alice), body="waits", to="next")
    # plumb's notice of a bounce is a note too, but not the project's agents'.
    later = timezone.now() + timezone.timedelta(seconds=project.note_ttl + 1)
    assert services.notes_bounce(now=later) == 1
    notice = Note.objects.get(sender_kind=AuthorKind.SYSTEM)
    assert notice.recipient.handle == "alice"
    assert DailyUsage.objects.get(project=project, what="notes").used == 1


def test_without_a_budget_nothing_is_counted(alice, bob, room):
    services.note_leave(alice, body="free", to="bob")
    room_services.message_send(alice, room, body="free")
    assert not DailyUsage.objects.exists()


def test_the_purge_forgets_counters_of_past_days(alice, bob, project):
    set_policy(project, daily_note_budget=5)
    services.note_leave(fresh(alice), body="today", to="bob")
    DailyUsage.objects.create(project=project, day="2020-01-01", what="notes", used=3)

    room_services.purge_run()

    assert list(DailyUsage.objects.values_list("used", flat=True)) == [1]
