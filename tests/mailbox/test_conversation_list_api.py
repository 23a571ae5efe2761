"""``GET /api/v1/conversations/`` (list_conversations): the caller's threads, newest
activity first, paged, in a fixed number of queries (SPEC §3.3).
"""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.conftest import client_for
from tests.mailbox.notes import CONVERSATIONS, assert_refused, leave

pytestmark = pytest.mark.django_db


def test_the_conversation_list_shows_only_the_callers_threads_newest_activity_first(
    alice, bob, carol
):
    with_bob = leave(alice, body="hi bob", to="bob").json()["conversation_id"]
    with_carol = leave(alice, body="hi carol", to="carol").json()["conversation_id"]
    leave(bob, body="not alice's business", to="carol")
    last = leave(bob, body="hi alice", conversation_id=with_bob).json()["note"]

    response = client_for(alice).get(CONVERSATIONS)

    assert response.status_code == 200
    body = response.json()
    assert [c["id"] for c in body["conversations"]] == [with_bob, with_carol]
    assert body["has_more"] is False
    newest = body["conversations"][0]
    assert {p["name"] for p in newest["participants"]} == {"alice", "bob"}
    assert newest["participants"][0] == {
        "name": "alice",
        "workspace": "main",
        "project": alice.workspace.project.slug,
        "kind": "agent",
    }
    assert newest["cap"] == 20
    assert newest["notes_count"] == 2
    assert newest["exchanges_left"] == 18
    assert newest["last_note_at"] == last["created_at"]
    assert body["conversations"][1]["notes_count"] == 1


def test_the_conversation_list_pages_by_after_id(alice, bob):
    threads = [
        leave(alice, body=f"thread {i}", to="bob").json()["conversation_id"] for i in range(3)
    ]
    client = client_for(alice)

    first = client.get(CONVERSATIONS, {"limit": 2}).json()
    second = client.get(CONVERSATIONS, {"limit": 2, "after_id": first["conversations"][-1]["id"]})

    assert [c["id"] for c in first["conversations"]] == [threads[2], threads[1]]
    assert first["has_more"] is True
    assert second.status_code == 200
    assert [c["id"] for c in second.json()["conversations"]] == [threads[0]]
    assert second.json()["has_more"] is False


def test_the_conversation_list_refuses_an_after_id_that_is_not_one_of_the_callers_threads(
    alice, bob, carol
):
    others = leave(bob, body="bob and carol only", to="carol").json()["conversation_id"]

    for after_id in ("cnv_nope", others):
        response = client_for(alice).get(CONVERSATIONS, {"after_id": after_id})
        assert_refused(response, 404, "conversation_not_found")


@pytest.mark.parametrize("limit", ["0", "201", "-1", "many"])
def test_the_conversation_list_refuses_a_limit_out_of_range(alice, limit):
    response = client_for(alice).get(CONVERSATIONS, {"limit": limit})

    assert_refused(response, 400, "validation_error")
    assert "limit" in response.json()["error"]["details"]


def test_the_conversation_list_accepts_limits_of_1_and_200(alice, bob):
    leave(alice, body="a", to="bob")
    leave(alice, body="b", to="bob")

    assert len(client_for(alice).get(CONVERSATIONS, {"limit": 1}).json()["conversations"]) == 1
    assert len(client_for(alice).get(CONVERSATIONS, {"limit": 200}).json()["conversations"]) == 2


def test_the_conversation_list_runs_a_fixed_number_of_queries(alice, bob, carol):
    leave(alice, body="one", to="bob")
    client = client_for(alice)
    with CaptureQueriesContext(connection) as one:
        assert len(client.get(CONVERSATIONS).json()["conversations"]) == 1
    for i in range(4):
        conversation_id = leave(alice, body=f"more {i}", to="bob").json()["conversation_id"]
        leave(alice, body="and carol", to="carol", conversation_id=conversation_id)
    with CaptureQueriesContext(connection) as five:
        assert len(client.get(CONVERSATIONS).json()["conversations"]) == 5

    assert len(five) == len(one)
