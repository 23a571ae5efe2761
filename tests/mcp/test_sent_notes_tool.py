"""``list_sent_notes`` over MCP: the JSON of ``GET /api/v1/notes/sent/`` and the
same refusals (SPEC §3.6, §6). The listing itself is tested through REST in
``tests/mailbox/test_notes_sent_api.py``.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from mailbox import services
from tests.conftest import client_for
from tests.doors import mcp_result

pytestmark = pytest.mark.django_db


def tool(session, arguments: dict) -> dict:
    return mcp_result(session.raw_token, "list_sent_notes", arguments)


def rest(session, params: dict) -> dict:
    return client_for(session).get("/api/v1/notes/sent/", params).json()


def test_list_sent_notes_answers_what_rest_answers(alice, bob):
    for i in range(3):
        services.note_leave(alice, to="bob", body=f"note {i}")
    services.notes_claim(bob)
    waiting = services.note_leave(alice, to="next", body="hand-over").note
    services.notes_bounce(now=waiting.created_at + timedelta(days=8))
    arguments = {"limit": 3, "state": "delivered"}

    result = tool(alice, arguments)

    assert result["isError"] is False
    by_mcp = result["structuredContent"]
    by_rest = rest(alice, arguments)
    assert [n["state"] for n in by_mcp["sent"]] == ["delivered"] * 3
    # The notice of the bounce rode on the first call (MCP) only.
    assert [n["bounce_of"] for n in by_mcp["notes"]] == [waiting.public_id]
    assert by_rest["notes"] == []
    assert {**by_mcp, "notes": []} == by_rest


@pytest.mark.parametrize(
    ("arguments", "code", "field"),
    [
        ({"state": "lost"}, "validation_error", "state"),
        ({"limit": 0}, "validation_error", "limit"),
        ({"limit": 501}, "validation_error", "limit"),
        ({"wait": 31}, "validation_error", "wait"),
        ({"wait": -1}, "validation_error", "wait"),
        ({"after_id": "note_nobodys"}, "note_not_found", None),
    ],
)
def test_list_sent_notes_refuses_what_rest_refuses(alice, arguments, code, field):
    by_mcp = tool(alice, arguments)
    by_rest = rest(alice, arguments)

    assert by_mcp["isError"] is True
    for error in (by_mcp["structuredContent"]["error"], by_rest["error"]):
        assert error["code"] == code
        if field:
            assert list(error["details"]) == [field]


@pytest.mark.parametrize(
    ("arguments", "field"),
    [({"limit": "5"}, "limit"), ({"state": 1}, "state"), ({"wait": "5"}, "wait")],
)
def test_list_sent_notes_takes_no_strings_for_numbers_nor_numbers_for_states(
    alice, arguments, field
):
    error = tool(alice, arguments)["structuredContent"]["error"]

    assert error["code"] == "validation_error"
    assert list(error["details"]) == [field]


def test_list_sent_notes_with_wait_and_nothing_waiting_answers_at_once(alice, bob):
    services.note_leave(alice, to="bob", body="hi")
    services.notes_claim(bob)
    started = time.monotonic()

    result = tool(alice, {"state": "waiting", "wait": 10})

    assert time.monotonic() - started < 2
    assert result["structuredContent"]["sent"] == []
