"""Replies with ``leave_note``: who may reply, whom a reply goes to, new participants, and
the thread's cap of exchanges (SPEC §3.2).

Every refusal is checked for its status, its code, that nothing was stored and that the
idempotency key it carried was not used up.
"""

import pytest

from mailbox import services
from mailbox.models import Conversation, Note, Project
from tests.factories import OptInFactory
from tests.mailbox.notes import assert_refused, history, leave, note_row, participant_names, stored

pytestmark = pytest.mark.django_db


def test_a_reply_without_to_goes_to_the_one_other_participant(alice, bob):
    conversation_id = leave(alice, body="question?", to="bob").json()["conversation_id"]

    reply = leave(bob, body="answer.", conversation_id=conversation_id)

    assert reply.status_code == 201, reply.json()
    assert reply.json()["conversation_id"] == conversation_id
    assert reply.json()["note"]["to"] == "alice"
    assert reply.json()["note"]["position"] == 2
    assert reply.json()["delivery"] == "session"
    assert note_row(reply).recipient.handle == "alice"
    assert participant_names(conversation_id) == {"alice", "bob"}


def test_a_reply_by_a_session_that_is_not_a_participant_is_refused(alice, bob, carol):
    conversation_id = leave(alice, body="private", to="bob").json()["conversation_id"]
    before = stored()

    refused = leave(
        carol, body="let me in", conversation_id=conversation_id, to="bob", idempotency_key="k1"
    )

    assert_refused(refused, 403, "not_a_participant")
    assert stored() == before
    assert participant_names(conversation_id) == {"alice", "bob"}
    # The refusal did not use up the key: carol's own thread may take it.
    assert leave(carol, body="let me in", to="bob", idempotency_key="k1").status_code == 201


def test_a_reply_into_an_unknown_conversation_is_not_found(alice, bob):
    conversation_id = leave(alice, body="hello", to="bob").json()["conversation_id"]
    before = stored()

    refused = leave(bob, body="hi", conversation_id="cnv_doesnotexist", idempotency_key="k1")

    assert_refused(refused, 404, "conversation_not_found")
    assert stored() == before
    fixed = leave(bob, body="hi", conversation_id=conversation_id, idempotency_key="k1")
    assert fixed.status_code == 201


def test_a_reply_without_to_is_ambiguous_when_there_is_no_other_participant(alice, bob):
    conversation_id = leave(alice, body="for whoever comes next").json()["conversation_id"]
    before = stored()

    refused = leave(alice, body="and also", conversation_id=conversation_id, idempotency_key="k1")

    assert_refused(refused, 400, "recipient_ambiguous")
    assert stored() == before
    fixed = leave(
        alice, body="and also", conversation_id=conversation_id, to="bob", idempotency_key="k1"
    )
    assert fixed.status_code == 201
    assert fixed.json()["note"]["to"] == "bob"


def test_a_reply_without_to_is_ambiguous_when_there_are_several_other_participants(
    alice, bob, carol
):
    conversation_id = leave(alice, body="hello bob", to="bob").json()["conversation_id"]
    leave(alice, body="hello carol", to="carol", conversation_id=conversation_id)
    before = stored()

    refused = leave(alice, body="to whom?", conversation_id=conversation_id, idempotency_key="k1")

    assert_refused(refused, 400, "recipient_ambiguous")
    assert stored() == before
    fixed = leave(
        alice, body="to whom?", conversation_id=conversation_id, to="carol", idempotency_key="k1"
    )
    assert fixed.status_code == 201


def test_naming_a_new_to_in_a_reply_adds_that_name_as_a_participant(alice, bob, carol):
    conversation_id = leave(alice, body="hello bob", to="bob").json()["conversation_id"]

    reply = leave(alice, body="looping in carol", to="carol", conversation_id=conversation_id)

    assert reply.status_code == 201
    assert reply.json()["note"]["to"] == "carol"
    assert note_row(reply).bound_session == carol
    thread = history(carol, conversation_id)
    assert thread.status_code == 200
    assert {p["name"] for p in thread.json()["conversation"]["participants"]} == {
        "alice",
        "bob",
        "carol",
    }


def test_naming_an_unknown_to_in_a_reply_is_refused_and_adds_no_participant(alice, bob):
    conversation_id = leave(alice, body="hello bob", to="bob").json()["conversation_id"]
    before = stored()

    refused = leave(alice, body="x", to="nobody", conversation_id=conversation_id)

    assert_refused(refused, 404, "recipient_not_found")
    assert stored() == before
    assert participant_names(conversation_id) == {"alice", "bob"}


def test_naming_a_new_to_of_another_project_in_a_reply_needs_its_opt_in(alice, bob, bert):
    conversation_id = leave(alice, body="hello bob", to="bob").json()["conversation_id"]
    before = stored()

    refused = leave(alice, body="x", to="bert", conversation_id=conversation_id)

    assert_refused(refused, 403, "cross_project_refused")
    assert stored() == before
    assert participant_names(conversation_id) == {"alice", "bob"}


def test_exchanges_left_counts_down_with_every_note(alice, bob):
    first = leave(alice, body="1", to="bob").json()
    conversation_id = first["conversation_id"]
    second = leave(bob, body="2", conversation_id=conversation_id).json()
    third = leave(alice, body="3", conversation_id=conversation_id).json()

    assert [first["exchanges_left"], second["exchanges_left"], third["exchanges_left"]] == [
        19,
        18,
        17,
    ]
    assert third["note"]["exchanges_left"] == 17
    assert Conversation.objects.get(public_id=conversation_id).notes_count == 3


def test_a_reply_is_refused_once_the_cap_is_spent(alice, bob, project):
    Project.objects.filter(pk=project.pk).update(max_exchanges=2)
    conversation_id = leave(alice, body="1", to="bob").json()["conversation_id"]
    last = leave(bob, body="2", conversation_id=conversation_id)
    assert last.json()["exchanges_left"] == 0
    before = stored()

    refused = leave(alice, body="3", conversation_id=conversation_id, idempotency_key="k1")

    assert_refused(refused, 409, "conversation_exhausted")
    assert stored() == before
    assert Conversation.objects.get(public_id=conversation_id).notes_count == 2
    # The refused key is still free: a new thread may use it.
    fresh = leave(alice, body="3", to="bob", idempotency_key="k1")
    assert fresh.status_code == 201
    assert fresh.json()["conversation_id"] != conversation_id


def test_a_thread_keeps_the_cap_it_was_created_with(alice, bob, project):
    Project.objects.filter(pk=project.pk).update(max_exchanges=2)
    old_thread = leave(alice, body="1", to="bob").json()["conversation_id"]
    services.project_update(Project.objects.get(pk=project.pk), actor="test", max_exchanges=5)

    reply = leave(bob, body="2", conversation_id=old_thread)
    refused = leave(alice, body="3", conversation_id=old_thread)
    new_thread = leave(alice, body="fresh", to="bob")

    assert reply.json()["exchanges_left"] == 0
    assert_refused(refused, 409, "conversation_exhausted")
    assert Conversation.objects.get(public_id=old_thread).cap == 2
    assert new_thread.json()["exchanges_left"] == 4
    assert Conversation.objects.get(public_id=new_thread.json()["conversation_id"]).cap == 5


@pytest.mark.parametrize(
    ("sender_cap", "recipient_cap", "expected"), [(20, 3, 3), (4, 30, 4), (6, 6, 6)]
)
def test_a_cross_project_thread_is_capped_at_the_smaller_of_both_projects(
    alice, bert, project, beta, sender_cap, recipient_cap, expected
):
    Project.objects.filter(pk=project.pk).update(max_exchanges=sender_cap)
    Project.objects.filter(pk=beta.pk).update(max_exchanges=recipient_cap)
    OptInFactory(project=beta, source=project)

    response = leave(alice, body="hello beta", to="bert")

    assert response.status_code == 201, response.json()
    assert response.json()["exchanges_left"] == expected - 1
    assert Conversation.objects.get(public_id=response.json()["conversation_id"]).cap == expected


def test_the_last_note_of_a_spent_thread_can_still_be_replayed(alice, bob, project):
    Project.objects.filter(pk=project.pk).update(max_exchanges=1)
    first = leave(alice, body="only one", to="bob", idempotency_key="k1")
    assert first.json()["exchanges_left"] == 0

    retry = leave(alice, body="only one", to="bob", idempotency_key="k1")

    assert retry.status_code == 200, retry.json()
    assert retry.json()["replayed"] is True
    assert retry.json()["note"]["id"] == first.json()["note"]["id"]
    assert Note.objects.count() == 1
