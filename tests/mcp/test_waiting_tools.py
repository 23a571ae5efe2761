"""The waiting tools over MCP: ``wait_for_activity`` and ``read_messages`` with ``wait``.

Same services, same JSON, same error codes as REST (``tests/rooms/test_activity_api.py``,
``tests/rooms/test_message_read_api.py``); the waiting rules themselves are
``tests/rooms/test_waiting.py``.
"""

from __future__ import annotations

import pytest

from common import limits
from mailbox import services as mailbox_services
from mailbox.models import Note
from rooms import services
from rooms.models import Member
from tests.conftest import client_for
from tests.doors import mcp_result
from tests.framing import says_the_same

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_rate_limits(settings):
    settings.PLUMB_RATE_SESSION = None


@pytest.fixture
def general(alice, bob):
    """bob creates ``general`` (seq 1), alice joins (seq 2)."""
    services.room_create(bob, slug="general")
    services.room_join(alice, "general")


def call(session, name: str, arguments: dict) -> dict:
    """A tools/call as ``session``; the result, its text and structured forms agreeing."""
    result = mcp_result(session.raw_token, name, arguments)
    assert says_the_same(result["content"][0]["text"], result["structuredContent"])
    return result


def test_wait_for_activity_answers_what_rest_answers(alice, bob, general):
    services.message_send(bob, "general", body="news")

    tool = call(alice, "wait_for_activity", {})
    rest = client_for(alice).get("/api/v1/activity/").json()

    assert tool["isError"] is False
    assert tool["structuredContent"] == rest
    assert rest["rooms"] == [{"slug": "general", "latest_seq": 3, "read_seq": 2, "unseen": 1}]


def test_wait_for_activity_delivers_a_pending_note_once(alice, bob, general):
    left = mailbox_services.note_leave(bob, to="alice", body="psst")

    first = call(alice, "wait_for_activity", {"wait": limits.WAIT_MAX})["structuredContent"]
    second = call(alice, "wait_for_activity", {})["structuredContent"]

    assert [note["id"] for note in first["notes"]] == [left.note.public_id]
    assert second == {"notes": [], "rooms": []}
    assert Note.objects.get().delivered_to_id == alice.pk


def test_wait_for_activity_times_out_empty(alice, general):
    result = call(alice, "wait_for_activity", {"wait": 0.2})

    assert result["structuredContent"] == {"notes": [], "rooms": []}


@pytest.mark.parametrize(
    "arguments",
    [{"wait": limits.WAIT_MAX + 1}, {"wait": -1}, {"wait": "5"}, {"wiat": 5}],
    ids=["too-long", "negative", "string", "unknown-argument"],
)
def test_wait_for_activity_refuses_bad_arguments_as_rest_does(alice, bob, general, arguments):
    mailbox_services.note_leave(bob, to="alice", body="stays pending")

    result = call(alice, "wait_for_activity", arguments)

    assert result["isError"] is True
    error = result["structuredContent"]["error"]
    assert error["code"] == "validation_error"
    assert set(error["details"]) == set(arguments)
    assert Note.objects.get().delivered_at is None


def test_read_messages_with_wait_answers_at_once_when_an_event_is_above_the_reference(
    alice, bob, general
):
    services.message_send(bob, "general", body="already here")

    result = call(alice, "read_messages", {"room": "general", "wait": limits.WAIT_MAX})

    events = result["structuredContent"]["events"]
    assert [event["message"]["body"] for event in events] == ["already here"]
    assert Member.objects.get(name=alice.name).read_seq == 3


def test_read_messages_with_wait_times_out_with_no_events(alice, general):
    result = call(alice, "read_messages", {"room": "general", "wait": 0.2, "kinds": ["message"]})

    assert result["isError"] is False
    assert result["structuredContent"]["events"] == []
    assert result["structuredContent"]["read_seq"] == 2


def test_read_messages_with_wait_refuses_a_non_member_at_once(carol, general):
    result = call(carol, "read_messages", {"room": "general", "wait": limits.WAIT_MAX})

    assert result["isError"] is True
    assert result["structuredContent"]["error"]["code"] == "not_a_member"
