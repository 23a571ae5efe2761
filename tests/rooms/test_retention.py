"""The retention purge (SPEC §8): old events and notes go, seqs stay, reads say where
history starts."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from mailbox import services as mailbox_services
from mailbox.models import AuditRecord, Conversation, Note
from rooms import services
from rooms.models import Event, Message, MessageMention, Room
from tests.cli import plumb
from tests.conftest import client_for
from tests.doors import mcp_call

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("_no_rate_limits")]


def backdate(days: float, *querysets) -> None:
    then = timezone.now() - timedelta(days=days)
    for queryset in querysets:
        queryset.update(created_at=then)


@pytest.fixture
def history(alice, bob, carol, project):
    """``lab``: 6 old events (seqs 1-6, two days old) and 2 new ones; old and new notes."""
    services.room_create(alice, slug="lab")
    services.room_join(bob, "lab")
    old = services.message_send(alice, "lab", body="old, for @bob").message
    services.review_add(bob, "lab", old.public_id, verdict="approve")
    services.message_send(bob, "lab", body="old too")
    services.message_send(alice, "lab", body="old three")
    backdate(2, Event.objects.all(), Message.objects.all())
    services.message_send(bob, "lab", body="new")
    services.review_add(alice, "lab", old.public_id, verdict="comment", body="still true")

    delivered = mailbox_services.note_leave(alice, body="old, read", to="bob").note
    mailbox_services.notes_claim(bob)
    waiting = mailbox_services.note_leave(alice, body="old, never read", to="carol").note
    Note.objects.filter(pk__in=[delivered.pk, waiting.pk]).update(
        created_at=timezone.now() - timedelta(days=2)
    )
    Note.objects.filter(pk=delivered.pk).update(delivered_at=timezone.now() - timedelta(days=2))
    fresh = mailbox_services.note_leave(bob, body="new note", to="alice").note
    mailbox_services.project_update(project, actor="test", retention_days=1)
    return {"old": old, "delivered": delivered, "waiting": waiting, "fresh": fresh}


def test_a_purge_deletes_old_events_keeps_new_ones_and_never_reuses_seqs(
    alice, bob, history, project
):
    done = services.purge_run()

    room = Room.objects.get(slug="lab")
    assert list(Event.objects.order_by("seq").values_list("seq", flat=True)) == [7, 8]
    assert (room.head_seq, room.history_starts_at) == (8, 7)
    # The message the kept review points at stays with it; the others went with their events.
    assert set(Message.objects.values_list("body", flat=True)) == {"old, for @bob", "new"}
    assert list(MessageMention.objects.values_list("message_id", flat=True)) == [history["old"].pk]
    assert done[project.slug].events == 6
    assert done[project.slug].messages == 2

    sent = services.message_send(alice, "lab", body="after the purge")
    assert sent.message.seq == 9


@pytest.mark.parametrize("door", ["rest", "mcp"])
def test_a_read_from_below_the_first_kept_event_says_history_starts_at(door, bob, history):
    services.purge_run()

    if door == "rest":
        body = client_for(bob).get("/api/v1/rooms/lab/messages/?after_seq=0").json()
    else:
        _, body = mcp_call(bob.raw_token, "read_messages", {"room": "lab", "after_seq": 0})

    assert body["history_starts_at"] == 7
    assert [e["seq"] for e in body["events"]] == [7, 8]
    assert body["events"][1]["review"]["message_id"] == history["old"].public_id
    later = client_for(bob).get("/api/v1/rooms/lab/messages/?after_seq=6").json()
    assert "history_starts_at" not in later


def test_undelivered_notes_bounce_instead_of_vanishing(alice, history, project):
    done = services.purge_run()

    waiting = Note.objects.get(pk=history["waiting"].pk)
    assert waiting.state == "bounced"
    notice = Note.objects.get(bounce_of=waiting.public_id)
    assert notice.recipient.handle == "alice"
    assert not Note.objects.filter(pk=history["delivered"].pk).exists()
    assert Note.objects.filter(pk=history["fresh"].pk).exists()
    assert not Conversation.objects.filter(pk=history["delivered"].conversation_id).exists()
    assert (
        done[project.slug].bounced,
        done[project.slug].notes,
        done[project.slug].conversations,
    ) == (
        1,
        1,
        1,
    )


def test_a_purge_is_audited_with_its_counts_and_is_idempotent(history, project):
    services.purge_run()
    again = services.purge_run()

    [record] = AuditRecord.objects.filter(action="project.purge")
    assert record.actor == "plumb"
    assert record.target == (
        "6 events, 2 messages, 1 notes, 1 conversations deleted; 1 notes bounced"
    )
    assert not again[project.slug]
    assert Event.objects.count() == 2


def test_a_project_without_retention_keeps_everything(alice, project):
    services.room_create(alice, slug="lab")
    backdate(400, Event.objects.all())
    assert services.purge_run() == {}
    assert Event.objects.count() == 1


def test_the_purge_goes_in_batches_up_to_the_first_event_to_keep(alice, bob, project):
    services.room_create(alice, slug="lab")
    for i in range(11):
        services.message_send(alice, "lab", body=f"m{i}")
    backdate(3, Event.objects.filter(seq__lte=8), Message.objects.filter(seq__lte=8))
    # An old event after a newer one is kept: the purge removes a prefix of the stream.
    backdate(3, Event.objects.filter(seq=10))
    mailbox_services.project_update(project, actor="test", retention_days=1)

    done = services.purge_run(batch=3)

    assert done[project.slug].events == 8
    assert Room.objects.get(slug="lab").history_starts_at == 9
    assert list(Event.objects.values_list("seq", flat=True).order_by("seq")) == [9, 10, 11, 12]


def test_plumb_purge_runs_it_on_demand_and_says_what_went(history, project):
    out, _ = plumb("purge", project.slug)
    assert out.strip() == (
        f"Purged project {project.slug}: 6 events, 2 messages, 1 notes, 1 conversations deleted; "
        "1 notes bounced."
    )
    out, _ = plumb("purge")
    assert "nothing older than its retention" in out
    assert AuditRecord.objects.get(action="project.purge").actor.startswith("cli:")
