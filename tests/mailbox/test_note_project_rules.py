"""The project rules of ``leave_note``: opt-ins between projects and each project's
mailbox switch, for new threads and replies (SPEC §3.2, recipient checks).

Every refusal is checked for its status, its code, that nothing was stored and that the
idempotency key it carried was not used up.
"""

import pytest

from mailbox.models import CrossProjectOptIn, Project
from tests.conftest import client_for
from tests.factories import OptInFactory
from tests.mailbox.notes import (
    CONVERSATIONS,
    assert_refused,
    check,
    history,
    ids,
    leave,
    note_row,
    stored,
)

pytestmark = pytest.mark.django_db


# --- cross-project -------------------------------------------------------------------------


def test_a_note_to_another_project_without_its_opt_in_is_refused(alice, bert, project, beta):
    before = stored()

    refused = leave(alice, body="hello beta", to="bert", idempotency_key="k1")

    assert_refused(refused, 403, "cross_project_refused")
    assert stored() == before
    assert check(bert).json()["notes"] == []
    OptInFactory(project=beta, source=project)
    assert leave(alice, body="hello beta", to="bert", idempotency_key="k1").status_code == 201


def test_a_note_to_another_project_that_opted_in_to_the_sender_is_accepted(
    alice, bert, project, beta
):
    OptInFactory(project=beta, source=project)

    response = leave(alice, body="hello beta", to="bert")

    assert response.status_code == 201, response.json()
    assert response.json()["delivery"] == "session"
    received = check(bert).json()["notes"]
    assert ids(received) == [response.json()["note"]["id"]]
    assert received[0]["from"] == {
        "name": "alice",
        "workspace": "main",
        "project": project.slug,
        "kind": "agent",
    }


def test_a_note_to_a_project_that_accepts_all_projects_is_accepted(alice, bert, beta):
    Project.objects.filter(pk=beta.pk).update(accept_all_projects=True)

    response = leave(alice, body="hello beta", to="bert")

    assert response.status_code == 201, response.json()
    assert note_row(response).bound_session == bert


def test_an_opt_in_only_works_in_its_own_direction(alice, bert, project, beta):
    OptInFactory(project=project, source=beta)  # alice's project accepts beta, not the reverse
    Project.objects.filter(pk=project.pk).update(accept_all_projects=True)
    before = stored()

    refused = leave(alice, body="hello beta", to="bert")

    assert_refused(refused, 403, "cross_project_refused")
    assert stored() == before
    # ...while beta may write to alice.
    assert leave(bert, body="hello alpha", to="alice").status_code == 201


def test_a_reply_to_a_participant_who_wrote_in_the_thread_skips_the_opt_in_check(
    alice, bert, project, beta
):
    OptInFactory(project=beta, source=project)
    conversation_id = leave(alice, body="hello beta", to="bert").json()["conversation_id"]
    # alice wrote, so bert may answer although alice's project never opted in to beta.
    answer = leave(bert, body="hello alpha", conversation_id=conversation_id)
    assert answer.status_code == 201, answer.json()
    CrossProjectOptIn.objects.filter(project=beta, source=project).delete()

    again = leave(alice, body="thanks", conversation_id=conversation_id)

    assert again.status_code == 201, again.json()
    assert again.json()["note"]["to"] == "bert"
    assert again.json()["exchanges_left"] == 17


def test_a_reply_to_a_participant_who_never_wrote_is_checked_for_the_opt_in(
    alice, bert, project, beta
):
    OptInFactory(project=beta, source=project)
    conversation_id = leave(alice, body="hello beta", to="bert").json()["conversation_id"]
    CrossProjectOptIn.objects.filter(project=beta, source=project).delete()
    before = stored()

    refused = leave(alice, body="ping?", conversation_id=conversation_id, idempotency_key="k1")

    assert_refused(refused, 403, "cross_project_refused")
    assert stored() == before
    OptInFactory(project=beta, source=project)
    fixed = leave(alice, body="ping?", conversation_id=conversation_id, idempotency_key="k1")
    assert fixed.status_code == 201


def test_a_session_of_another_project_cannot_read_or_reply_to_a_thread_it_is_not_in(
    alice, bob, bert, beta, project
):
    Project.objects.filter(pk=project.pk).update(accept_all_projects=True)
    conversation_id = leave(alice, body="internal", to="bob").json()["conversation_id"]
    before = stored()

    read = history(bert, conversation_id)
    reply = leave(bert, body="sneaking in", conversation_id=conversation_id, to="alice")

    assert_refused(read, 403, "not_a_participant")
    assert "internal" not in read.content.decode()
    assert_refused(reply, 403, "not_a_participant")
    assert stored() == before
    assert conversation_id not in client_for(bert).get(CONVERSATIONS).content.decode()


# --- mailbox switches ------------------------------------------------------------------


@pytest.mark.parametrize("to", ["bob", "next", None])
def test_a_sender_whose_project_has_the_mailbox_off_is_refused(alice, bob, project, to):
    Project.objects.filter(pk=project.pk).update(mailbox_enabled=False)
    payload = {"body": "hello", "idempotency_key": "k1"}
    if to is not None:
        payload["to"] = to
    before = stored()

    refused = leave(alice, **payload)

    assert_refused(refused, 403, "mailbox_disabled")
    assert stored() == before
    Project.objects.filter(pk=project.pk).update(mailbox_enabled=True)
    assert leave(alice, **payload).status_code == 201


def test_a_sender_whose_project_has_the_mailbox_off_cannot_reply(alice, bob, project):
    conversation_id = leave(alice, body="hello", to="bob").json()["conversation_id"]
    Project.objects.filter(pk=project.pk).update(mailbox_enabled=False)
    before = stored()

    refused = leave(bob, body="answer", conversation_id=conversation_id)

    assert_refused(refused, 403, "mailbox_disabled")
    assert stored() == before


def test_a_recipient_whose_project_has_the_mailbox_off_is_refused(alice, bert, beta):
    Project.objects.filter(pk=beta.pk).update(mailbox_enabled=False, accept_all_projects=True)
    before = stored()

    refused = leave(alice, body="hello", to="bert", idempotency_key="k1")

    assert_refused(refused, 403, "mailbox_disabled")
    assert stored() == before
    assert check(bert).json()["notes"] == []
    Project.objects.filter(pk=beta.pk).update(mailbox_enabled=True)
    assert leave(alice, body="hello", to="bert", idempotency_key="k1").status_code == 201


def test_a_reply_to_a_recipient_whose_project_turned_the_mailbox_off_is_refused(alice, bert, beta):
    Project.objects.filter(pk=beta.pk).update(accept_all_projects=True)
    conversation_id = leave(alice, body="hello", to="bert").json()["conversation_id"]
    leave(bert, body="hi", conversation_id=conversation_id)
    Project.objects.filter(pk=beta.pk).update(mailbox_enabled=False)
    before = stored()

    refused = leave(alice, body="still there?", conversation_id=conversation_id)

    assert_refused(refused, 403, "mailbox_disabled")
    assert stored() == before
