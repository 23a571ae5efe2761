"""The room that pauses itself when agents loop (SPEC §8 ``room_flood_limit``)."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from unittest import mock

import pytest
from django.utils import timezone

from common import metrics
from mailbox import services as mailbox_services
from mailbox.models import AgentName, AuditRecord, Project
from mailbox.representation import timestamp
from rooms import services
from rooms.errors import RoomPaused
from rooms.models import Event, Message, Room
from tests.cli import plumb
from tests.conftest import assert_error, client_for
from tests.doors import DOORS, call

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("_no_rate_limits")]

PATH = "/api/v1/rooms/lab/messages/"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def lab(alice, bob):
    services.room_create(alice, slug="lab")
    services.room_join(bob, "lab")
    return Room.objects.get(slug="lab")


def limit(project, n: int) -> None:
    mailbox_services.project_update(project, actor="test", room_flood_limit=n)


def pauses() -> list[Event]:
    return [e for e in Event.objects.filter(kind="moderation") if e.data["action"] == "pause"]


def later(seconds: float):
    return mock.patch(
        "django.utils.timezone.now", return_value=timezone.now() + timedelta(seconds=seconds)
    )


def test_two_agents_answering_each_other_pause_their_room_within_the_first_minute(alice, bob, lab):
    """The default limit: ordinary use never reaches it, a loop does in seconds."""
    sent, started, refused = 0, timezone.now(), None
    for i in range(1000):
        try:
            services.message_send((alice, bob)[i % 2], "lab", body=f"ping {i}")
        except RoomPaused as paused:
            refused = paused
            break
        sent += 1
    took = (timezone.now() - started).total_seconds()
    print(f"two agents looping: paused after {sent} messages in {took:.2f} s")

    assert sent == 120
    assert took < 60
    assert Message.objects.count() == 120
    [pause] = pauses()
    assert "more than 120 messages in a minute" in pause.data["reason"]
    lab.refresh_from_db()
    assert refused is not None
    assert refused.details == {
        "resumes_at": timestamp(lab.paused_until),
        "room_flood_limit": 120,
    }
    assert (
        AuditRecord.objects.filter(action="room.pause", actor="plumb", room_slug="lab").count() == 1
    )


@pytest.mark.parametrize("door", DOORS)
def test_sends_past_the_limit_are_refused_with_one_moderation_event(door, alice, bob, lab, project):
    limit(project, 3)
    for i in range(3):
        services.message_send(alice, "lab", body=f"m{i}")
    head = Room.objects.get(pk=lab.pk).head_seq
    refusals_before = metrics.CAP_REFUSALS.labels(cap="room_flood_limit")._value.get()

    answers = [
        call(door, (alice, bob)[i % 2], "send_message", PATH, {"body": f"x{i}"}) for i in range(5)
    ]

    assert {body["error"]["code"] for _, body in answers} == {"room_paused"}
    assert {status for status, _ in answers} <= {423, None}
    lab.refresh_from_db()
    assert {body["error"]["details"]["resumes_at"] for _, body in answers} == {
        timestamp(lab.paused_until)
    }
    # One event for the pause, not one per refused send.
    assert lab.head_seq == head + 1
    assert len(pauses()) == 1
    assert Message.objects.count() == 3
    assert metrics.CAP_REFUSALS.labels(cap="room_flood_limit")._value.get() == refusals_before + 5


def test_a_paused_room_says_when_to_retry(alice, lab, project):
    limit(project, 1)
    services.message_send(alice, "lab", body="one")
    response = client_for(alice).post(PATH, {"body": "two"}, format="json")
    error = assert_error(response, 423, "room_paused")
    assert 59 <= int(response["Retry-After"]) <= 60
    assert error["details"]["room_flood_limit"] == 1


def test_the_room_resumes_by_itself_a_minute_later(alice, bob, lab, project):
    limit(project, 2)
    services.message_send(alice, "lab", body="one")
    services.message_send(bob, "lab", body="two")
    with pytest.raises(RoomPaused):
        services.message_send(alice, "lab", body="three")
    with later(30), pytest.raises(RoomPaused):
        services.message_send(alice, "lab", body="still paused")

    with later(61):
        sent = services.message_send(alice, "lab", body="three again")
        services.message_send(bob, "lab", body="four")
        assert not services.room_paused_now(Room.objects.get(pk=lab.pk))

    assert sent.message.body == "three again"
    assert len(pauses()) == 1


def test_an_agents_review_waits_out_the_pause_too(alice, bob, lab, project):
    limit(project, 1)
    message = services.message_send(alice, "lab", body="one").message
    with pytest.raises(RoomPaused):
        services.message_send(bob, "lab", body="two")
    path = f"{PATH}{message.public_id}/reviews/"
    assert_error(
        client_for(bob).post(path, {"verdict": "approve"}, format="json"), 423, "room_paused"
    )


def test_a_refused_send_keeps_its_idempotency_key(alice, lab, project):
    limit(project, 1)
    services.message_send(alice, "lab", body="one")
    sent = {"body": "two", "idempotency_key": "k"}
    assert_error(client_for(alice).post(PATH, sent, format="json"), 423, "room_paused")
    assert_error(client_for(alice).post(PATH, sent, format="json"), 423, "room_paused")
    assert not Message.objects.filter(idempotency_key="k").exists()
    services.room_resume(lab, actor="test")
    assert client_for(alice).post(PATH, sent, format="json").status_code == 201


def test_an_operator_resumes_the_room_early_with_an_event_and_an_audit_record(alice, lab, project):
    limit(project, 1)
    services.message_send(alice, "lab", body="one")
    with pytest.raises(RoomPaused):
        services.message_send(alice, "lab", body="two")

    out, _ = plumb("room", "resume", "lab", "--reason", "the loop is fixed")

    assert "Resumed room lab" in out
    resume = Event.objects.filter(kind="moderation").order_by("-seq").first()
    assert resume.data == {"action": "resume", "reason": "the loop is fixed"}
    record = AuditRecord.objects.get(action="room.resume")
    assert (record.room_slug, record.reason) == ("lab", "the loop is fixed")
    assert record.actor.startswith("cli:")
    services.message_send(alice, "lab", body="two")  # and the count starts afresh
    out, _ = plumb("room", "resume", "lab")
    assert "is not paused; nothing changed" in out
    assert AuditRecord.objects.filter(action="room.resume").count() == 1


def test_people_are_never_counted_nor_paused(alice, bob, lab, project):
    limit(project, 1)
    with mock.patch.object(AgentName, "kind", new_callable=mock.PropertyMock, return_value="human"):
        for i in range(5):
            services.message_send(bob, "lab", body=f"a person {i}")
    services.message_send(alice, "lab", body="agent one")
    with pytest.raises(RoomPaused):
        services.message_send(alice, "lab", body="agent two")
    with mock.patch.object(AgentName, "kind", new_callable=mock.PropertyMock, return_value="human"):
        services.message_send(bob, "lab", body="a person in a paused room")
    assert Message.objects.count() == 7


def test_a_limit_of_zero_never_pauses(alice, bob, lab, project):
    limit(project, 0)
    for i in range(150):
        services.message_send((alice, bob)[i % 2], "lab", body=f"m{i}")
    assert not pauses()
    lab.refresh_from_db()
    assert (lab.flood_window, lab.flood_count) == (0, 0)


def test_the_limit_counts_a_minute_of_messages(alice, bob, lab, project):
    limit(project, 3)
    for i in range(3):
        services.message_send(alice, "lab", body=f"m{i}")
    with later(60):  # a new window: the count starts again
        for i in range(3):
            services.message_send(bob, "lab", body=f"n{i}")
        with pytest.raises(RoomPaused):
            services.message_send(bob, "lab", body="one too many")


def test_new_projects_take_the_sites_limit_and_existing_ones_keep_theirs(settings, project):
    settings.PLUMB_ROOM_FLOOD_LIMIT = 0

    plumb("project", "create", "loops-allowed")
    boot = mailbox_services.site_bootstrap(created_by="test")

    assert Project.objects.get(slug="loops-allowed").room_flood_limit == 0
    assert boot.project.room_flood_limit == 0
    project.refresh_from_db()
    assert project.room_flood_limit == 120


def test_an_explicit_limit_wins_over_the_sites(settings):
    settings.PLUMB_ROOM_FLOOD_LIMIT = 0

    plumb("project", "create", "guarded", "--room-flood-limit", "30")

    assert Project.objects.get(slug="guarded").room_flood_limit == 30


@pytest.mark.parametrize(("raw", "shown"), [("", "120"), ("0", "0"), ("500", "500"), ("-1", None)])
def test_the_sites_limit_comes_from_the_environment(raw, shown):
    """Read once at start: a bad value stops the server, naming the variable."""
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "--verbosity", "0", "-c", SHOW_LIMIT],
        cwd=ROOT,
        env={**os.environ, "PLUMB_ROOM_FLOOD_LIMIT": raw},
        capture_output=True,
        text=True,
        timeout=60,
    )

    if shown is None:
        assert done.returncode != 0
        assert "PLUMB_ROOM_FLOOD_LIMIT must be at least 0" in done.stderr
    else:
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == shown


SHOW_LIMIT = "from django.conf import settings; print(settings.PLUMB_ROOM_FLOOD_LIMIT)"
