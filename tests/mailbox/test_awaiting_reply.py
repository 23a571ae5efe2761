"""``awaiting_reply_from`` on conversation list entries (SPEC §3.3): who the thread
waits to hear from, computed for a whole page in a fixed number of queries."""

from __future__ import annotations

from datetime import timedelta

import pytest

from mailbox import services
from tests.conftest import client_for
from tests.factories import ProjectKeyFactory
from tests.mailbox.notes import CONVERSATIONS, leave

pytestmark = pytest.mark.django_db


def awaiting(session, conversation_id: str) -> list[str]:
    listed = client_for(session).get(CONVERSATIONS).json()["conversations"]
    [entry] = [c for c in listed if c["id"] == conversation_id]
    detail = client_for(session).get(f"{CONVERSATIONS}{conversation_id}/").json()
    assert detail["conversation"]["awaiting_reply_from"] == entry["awaiting_reply_from"]
    return entry["awaiting_reply_from"]


def test_a_thread_awaits_the_recipient_of_its_last_note(alice, bob):
    thread = leave(alice, body="can you review?", to="bob").json()["conversation_id"]

    assert awaiting(alice, thread) == ["bob"]
    assert awaiting(bob, thread) == ["bob"]

    leave(bob, body="done", conversation_id=thread)

    assert awaiting(alice, thread) == ["alice"]


def test_a_note_to_next_awaits_next_until_someone_picks_it_up(workspace, alice):
    thread = leave(alice, body="hand-over", to="next").json()["conversation_id"]

    assert awaiting(alice, thread) == ["next"]

    key = ProjectKeyFactory(project=workspace.project)
    newcomer = services.session_start(key, workspace_slug="main", name="newcomer").session
    services.notes_claim(newcomer)

    assert awaiting(alice, thread) == ["newcomer"]


def test_a_bounced_note_awaits_nobody_and_plumbs_notice_changes_nothing(alice):
    note = services.note_leave(alice, to="next", body="anyone?").note
    services.notes_bounce(now=note.created_at + timedelta(days=8))

    assert awaiting(alice, note.conversation.public_id) == []


def test_the_list_costs_three_queries_after_authentication_whatever_the_page(
    alice, bob, carol, settings, django_assert_num_queries
):
    settings.PLUMB_SEEN_WRITE_INTERVAL = 3600
    for i in range(5):
        thread = leave(alice, body=f"thread {i}", to="bob").json()["conversation_id"]
        leave(bob, body="reply", conversation_id=thread)
    services.notes_claim(alice)
    client = client_for(alice)

    # Authentication, the page with its last notes' ids, participants, the last notes.
    with django_assert_num_queries(4):
        response = client.get(CONVERSATIONS)

    assert [c["awaiting_reply_from"] for c in response.json()["conversations"]] == [["alice"]] * 5
