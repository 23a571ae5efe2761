"""Where a note goes and when it arrives: ``next`` notes, binding to a session or a name,
and delivery on every successful call, never on an error (SPEC §3.1, §3.2, §3.4).
"""

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from mailbox import services
from mailbox.models import AgentName, Note, Session
from tests.conftest import client_for
from tests.factories import SessionFactory, WorkspaceFactory
from tests.mailbox.notes import (
    CONVERSATIONS,
    assert_refused,
    check,
    history,
    ids,
    leave,
    note_row,
    participant_names,
    session_from,
    start_session,
)

pytestmark = pytest.mark.django_db

CURRENT = "/api/v1/sessions/current/"


def expire(session: Session) -> None:
    past = timezone.now() - timedelta(seconds=settings.PLUMB_SESSION_TTL + 60)
    Session.objects.filter(pk=session.pk).update(last_seen_at=past)


def absent(workspace, name: str) -> None:
    """A name that exists (bound to ``workspace``) but has no connected session."""
    services.session_end(SessionFactory(workspace=workspace, name=name))


# --- "next" --------------------------------------------------------------------------------


def test_a_next_note_goes_to_the_session_that_attaches_to_the_workspace_next(alice, bob, workspace):
    note_id = leave(alice, body="for whoever comes next").json()["note"]["id"]

    # bob attached before the note was sent: it is not his.
    assert check(bob).json()["notes"] == []
    started = start_session(workspace, name="carol")

    assert started.status_code == 201, started.json()
    assert ids(started.json()["notes"]) == [note_id]
    assert started.json()["notes"][0]["to"] == "next"
    row = Note.objects.get(public_id=note_id)
    assert row.delivered_to == session_from(started)
    assert row.delivered_at is not None


def test_a_next_note_is_never_delivered_to_its_sender(alice):
    note_id = leave(alice, body="for whoever comes next").json()["note"]["id"]

    assert check(alice).json()["notes"] == []
    assert client_for(alice).get(CURRENT).json()["notes"] == []
    assert Note.objects.get(public_id=note_id).delivered_at is None


def test_a_next_note_is_not_delivered_to_sessions_of_other_workspaces(alice, project):
    leave(alice, body="for whoever comes next in main")
    other = WorkspaceFactory(project=project, slug="other")

    started = start_session(other, name="dave")

    assert started.status_code == 201
    assert started.json()["notes"] == []
    assert check(session_from(started)).json()["notes"] == []
    assert Note.objects.get().delivered_at is None


def test_a_next_note_is_delivered_exactly_once(alice, workspace):
    note_id = leave(alice, body="only one of you gets this").json()["note"]["id"]

    first = start_session(workspace, name="carol")
    second = start_session(workspace, name="dave")

    assert ids(first.json()["notes"]) == [note_id]
    assert second.json()["notes"] == []
    assert check(session_from(first)).json()["notes"] == []
    assert Note.objects.get(public_id=note_id).delivered_to == session_from(first)


def test_a_next_note_is_delivered_to_a_generated_name_too(alice, workspace):
    note_id = leave(alice, body="welcome").json()["note"]["id"]

    started = start_session(workspace)

    assert started.status_code == 201
    assert ids(started.json()["notes"]) == [note_id]


def test_the_receiver_of_a_next_note_joins_the_thread_and_replies_to_the_sender_by_default(
    alice, workspace
):
    conversation_id = leave(alice, body="who is there?").json()["conversation_id"]
    carol = session_from(start_session(workspace, name="carol"))
    assert participant_names(conversation_id) == {"alice", "carol"}

    reply = leave(carol, body="carol here", conversation_id=conversation_id)

    assert reply.status_code == 201, reply.json()
    assert reply.json()["note"]["to"] == "alice"
    assert reply.json()["note"]["position"] == 2
    assert reply.json()["delivery"] == "session"
    assert note_row(reply).bound_session == alice
    received = check(alice).json()["notes"]
    assert [n["body"] for n in received] == ["carol here"]
    assert received[0]["from"]["name"] == "carol"


def test_session_start_delivers_name_and_next_notes_oldest_first(alice, carol, workspace):
    absent(workspace, "bob")
    first = leave(alice, body="next one").json()["note"]["id"]
    second = leave(carol, body="for bob by name", to="bob").json()["note"]["id"]
    third = leave(carol, body="next two").json()["note"]["id"]

    started = start_session(workspace, name="bob")

    assert started.status_code == 201
    assert ids(started.json()["notes"]) == [first, second, third]
    assert not Note.objects.filter(delivered_at__isnull=True).exists()


def test_an_idle_recipient_has_not_seen_a_note_until_its_next_call(alice, bob):
    # leave_note: "A peer idle on its human has not seen the message": nothing
    # is pushed, and the note neither expires nor counts as read meanwhile.
    note_id = leave(alice, body="are you there?", to="bob").json()["note"]["id"]

    leave(alice, body="unrelated", to="next")
    check(alice)

    row = Note.objects.get(public_id=note_id)
    assert row.delivered_at is None
    assert row.bound_session == bob
    assert ids(check(bob).json()["notes"]) == [note_id]


# --- binding ---------------------------------------------------------------------------


def test_a_note_to_a_connected_peer_is_bound_to_that_exact_session(alice, bob):
    response = leave(alice, body="ping", to="bob")

    assert response.status_code == 201
    assert response.json()["delivery"] == "session"
    assert response.json()["note"]["to"] == "bob"
    row = note_row(response)
    assert row.recipient.handle == "bob"
    assert row.bound_session == bob
    assert participant_names(response.json()["conversation_id"]) == {"alice", "bob"}

    received = check(bob).json()["notes"]

    assert ids(received) == [row.public_id]
    row.refresh_from_db()
    assert row.delivered_to == bob


def test_a_note_to_a_peer_with_no_connected_session_waits_for_the_name(alice, workspace):
    absent(workspace, "bob")

    response = leave(alice, body="read this when you are back", to="bob")

    assert response.status_code == 201
    assert response.json()["delivery"] == "name"
    assert note_row(response).bound_session is None
    started = start_session(workspace, name="bob")
    assert ids(started.json()["notes"]) == [response.json()["note"]["id"]]
    assert note_row(response).delivered_to == session_from(started)


def test_a_peer_whose_session_expired_is_not_connected_so_the_note_waits_for_the_name(
    alice, bob, workspace
):
    expire(bob)

    response = leave(alice, body="still there?", to="bob")

    assert response.status_code == 201
    assert response.json()["delivery"] == "name"
    assert note_row(response).bound_session is None
    started = start_session(workspace, name="bob")
    assert ids(started.json()["notes"]) == [response.json()["note"]["id"]]


def test_a_note_bound_to_a_session_that_ends_falls_back_to_the_name(alice, bob, workspace):
    response = leave(alice, body="bound to bob's session", to="bob")
    assert response.json()["delivery"] == "session"

    services.session_end(bob)

    row = note_row(response)
    assert row.bound_session is None
    assert row.delivered_at is None
    started = start_session(workspace, name="bob")
    assert ids(started.json()["notes"]) == [row.public_id]
    row.refresh_from_db()
    assert row.delivered_to == session_from(started)


def test_a_note_bound_to_a_session_that_expires_goes_to_the_names_next_session(
    alice, bob, workspace
):
    response = leave(alice, body="bound to bob's session", to="bob")
    assert response.json()["delivery"] == "session"
    expire(bob)

    started = start_session(workspace, name="bob")

    assert started.status_code == 201, started.json()
    assert ids(started.json()["notes"]) == [response.json()["note"]["id"]]
    bob.refresh_from_db()
    assert bob.ended_at is not None
    assert note_row(response).delivered_to == session_from(started)


def test_ending_a_session_over_the_api_delivers_its_pending_notes_in_that_reply(alice, bob):
    note_id = leave(alice, body="last words", to="bob").json()["note"]["id"]

    response = client_for(bob).delete(CURRENT)

    assert response.status_code == 200
    assert ids(response.json()["notes"]) == [note_id]
    assert Note.objects.get(public_id=note_id).delivered_to == bob


# --- delivery on every successful call, never on an error -----------------------------


def test_session_current_delivers_pending_notes(alice, bob):
    note_id = leave(alice, body="ping", to="bob").json()["note"]["id"]

    response = client_for(bob).get(CURRENT)

    assert response.status_code == 200
    assert ids(response.json()["notes"]) == [note_id]
    assert Note.objects.get(public_id=note_id).delivered_at is not None
    assert client_for(bob).get(CURRENT).json()["notes"] == []


def test_the_conversation_list_delivers_pending_notes(alice, bob):
    note_id = leave(alice, body="ping", to="bob").json()["note"]["id"]

    response = client_for(bob).get(CONVERSATIONS)

    assert response.status_code == 200
    assert ids(response.json()["notes"]) == [note_id]
    assert Note.objects.get(public_id=note_id).delivered_to == bob


def test_leaving_a_note_delivers_the_senders_pending_notes_in_its_reply(alice, bob, carol):
    waiting = leave(alice, body="for bob", to="bob").json()["note"]["id"]

    response = leave(bob, body="for carol", to="carol")

    assert response.status_code == 201
    assert ids(response.json()["notes"]) == [waiting]
    assert Note.objects.get(public_id=waiting).delivered_to == bob


def _fail_leave_note(session):
    return leave(session, body="")


def _fail_unknown_conversation(session):
    return history(session, "cnv_nope")


def _fail_bad_wait(session):
    return check(session, wait="-1")


def _fail_bad_limit(session):
    return client_for(session).get(CONVERSATIONS, {"limit": "0"})


def _fail_unknown_recipient(session):
    return leave(session, body="hi", to="nobody")


@pytest.mark.parametrize(
    "failing_call",
    [
        _fail_leave_note,
        _fail_unknown_conversation,
        _fail_bad_wait,
        _fail_bad_limit,
        _fail_unknown_recipient,
    ],
)
def test_an_error_response_delivers_nothing_and_the_next_successful_call_does(
    alice, bob, failing_call
):
    note_id = leave(alice, body="ping", to="bob").json()["note"]["id"]

    failed = failing_call(bob)

    assert 400 <= failed.status_code < 500
    assert "notes" not in failed.json()
    assert Note.objects.get(public_id=note_id).delivered_at is None
    succeeded = client_for(bob).get(CURRENT)
    assert ids(succeeded.json()["notes"]) == [note_id]


def test_a_session_start_refused_with_name_in_use_delivers_nothing(alice, bob, workspace):
    note_id = leave(alice, body="ping", to="bob").json()["note"]["id"]

    refused = start_session(workspace, name="bob")

    assert_refused(refused, 409, "name_in_use")
    assert Note.objects.get(public_id=note_id).delivered_at is None
    assert ids(check(bob).json()["notes"]) == [note_id]


def test_a_session_start_refused_with_name_taken_delivers_nothing(alice, bob, project, workspace):
    services.session_end(bob)
    note_id = leave(alice, body="ping", to="bob").json()["note"]["id"]
    other = WorkspaceFactory(project=project, slug="other")

    refused = start_session(other, name="bob")

    assert_refused(refused, 409, "name_taken")
    assert Note.objects.get(public_id=note_id).delivered_at is None
    assert ids(start_session(workspace, name="bob").json()["notes"]) == [note_id]


def test_a_session_start_in_an_unknown_workspace_is_refused_and_delivers_nothing(alice, workspace):
    note_id = leave(alice, body="for whoever comes next").json()["note"]["id"]
    sessions_before = Session.objects.count()

    # An unsaved workspace: only its project (for the key) and slug reach the request.
    refused = start_session(
        WorkspaceFactory.build(project=workspace.project, slug="nope"), name="carol"
    )

    assert_refused(refused, 404, "workspace_not_found")
    assert Session.objects.count() == sessions_before
    assert not AgentName.objects.filter(handle="carol").exists()
    assert Note.objects.get(public_id=note_id).delivered_at is None
    assert ids(start_session(workspace, name="carol").json()["notes"]) == [note_id]
