"""``POST /api/v1/rooms/<slug>/read`` (mark_read): setting the read position, forward only
(SPEC §4.3)."""

from __future__ import annotations

import pytest

from tests.conftest import assert_error, client_for
from tests.rooms.messaging import ROOMS, read, read_seq, seed_messages, stored_state

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("_no_rate_limits")]


def mark_read(session, slug="general", **body):
    return client_for(session).post(f"{ROOMS}{slug}/read", body, format="json")


def test_posting_a_read_position_sets_it_forward_only(alice, bob, general):
    seed_messages(bob, 5)  # up to 7

    forward = mark_read(alice, seq=6)
    backward = mark_read(alice, seq=3)

    assert forward.status_code == 200
    assert forward.json() == {"read_seq": 6, "latest_seq": 7, "notes": []}
    assert backward.status_code == 200
    assert backward.json()["read_seq"] == 6
    assert read_seq(alice) == 6
    assert [e["seq"] for e in read(alice).json()["events"]] == [7]


@pytest.mark.parametrize(
    "body",
    [{"seq": 4}, {"seq": "2"}, {"seq": -1}, {"seq": True}, {}],
    ids=["beyond-latest", "string", "negative", "bool", "missing"],
)
def test_posting_an_invalid_read_position_is_refused_with_validation_error(alice, general, body):
    before = stored_state()

    response = mark_read(alice, **body)

    error = assert_error(response, 400, "validation_error")
    assert "seq" in error["details"]
    assert stored_state() == before
