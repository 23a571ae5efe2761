"""The mailbox over HTTP: leave_note, check_messages, thread history and delivery.

Covers SPEC §3.1 (session start delivering notes), §3.2 to §3.4 and §3.5 as
far as the API goes, and every sentence of reference/leave_note.txt. Every
refusal is checked for its status, its code, that nothing was stored and that
the idempotency key it carried was not used up.
"""

import threading
import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from common import limits
from mailbox import services
from mailbox.models import (
    AgentName,
    Conversation,
    CrossProjectOptIn,
    Note,
    Participant,
    Project,
    Session,
)
from tests.conftest import client_for
from tests.factories import (
    OptInFactory,
    ProjectFactory,
    ProjectKeyFactory,
    SessionFactory,
    WorkspaceFactory,
)

pytestmark = pytest.mark.django_db

NOTES = "/api/v1/notes/"
SESSIONS = "/api/v1/sessions/"
CURRENT = "/api/v1/sessions/current/"
CONVERSATIONS = "/api/v1/conversations/"

NOTE_FIELDS = {
    "id",
    "conversation_id",
    "from",
    "to",
    "body",
    "created_at",
    "position",
    "exchanges_left",
}
GITHUB_TOKEN = "ghp_" + "a1B2c3D4e5" * 4


# --- helpers ---------------------------------------------------------------------------


def leave(session, **body):
    return client_for(session).post(NOTES, body, format="json")


def check(session, **params):
    return client_for(session).get(NOTES, params)


def history(session, conversation_id):
    return client_for(session).get(f"{CONVERSATIONS}{conversation_id}/")


def start_session(workspace, name=None):
    """POST /api/v1/sessions/ with a fresh key of the workspace's project."""
    key = ProjectKeyFactory(project=workspace.project)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key.raw_key}")
    body = {"workspace": workspace.slug}
    if name is not None:
        body["name"] = name
    return client.post(SESSIONS, body, format="json")


def session_from(response) -> Session:
    """The session a successful start created, carrying its token like the factory's."""
    session = Session.objects.get(public_id=response.json()["session"]["id"])
    session.raw_token = response.json()["token"]
    return session


def stored() -> tuple[int, int, int]:
    return Note.objects.count(), Conversation.objects.count(), Participant.objects.count()


def assert_refused(response, status: int, code: str) -> None:
    body = response.json()
    assert response.status_code == status, body
    assert body["error"]["code"] == code
    assert set(body["error"]) == {"code", "message", "details"}
    assert "notes" not in body  # never a delivery on an error response


def note_row(response) -> Note:
    return Note.objects.get(public_id=response.json()["note"]["id"])


def ids(notes: list[dict]) -> list[str]:
    return [n["id"] for n in notes]


def expire(session: Session) -> None:
    past = timezone.now() - timedelta(seconds=settings.PLUMB_SESSION_TTL + 60)
    Session.objects.filter(pk=session.pk).update(last_seen_at=past)


def absent(workspace, name: str) -> None:
    """A name that exists (bound to ``workspace``) but has no connected session."""
    services.session_end(SessionFactory(workspace=workspace, name=name))


def participant_names(conversation_id: str) -> set[str]:
    return set(
        Participant.objects.filter(conversation__public_id=conversation_id).values_list(
            "name__handle", flat=True
        )
    )


# --- fixtures --------------------------------------------------------------------------


@pytest.fixture
def beta():
    return ProjectFactory(slug="beta")


@pytest.fixture
def beta_workspace(beta):
    return WorkspaceFactory(project=beta, slug="main")


@pytest.fixture
def bert(beta_workspace):
    """A connected session in another project."""
    return SessionFactory(workspace=beta_workspace, name="bert")


# --- a new thread --------------------------------------------------------------------


def test_a_new_thread_defaults_to_next_and_the_reply_describes_the_note(alice, project):
    response = leave(alice, body="The build is green; deploy when ready.")

    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["delivery"] == "next"
    assert body["replayed"] is False
    assert body["scrubbed"] == []
    assert body["notes"] == []
    assert body["exchanges_left"] == project.max_exchanges - 1 == 19
    note = body["note"]
    assert set(note) >= NOTE_FIELDS
    assert note["id"].startswith("note_")
    assert note["conversation_id"] == body["conversation_id"]
    assert note["from"] == {"name": "alice", "workspace": "main", "project": project.slug}
    assert note["to"] == "next"
    assert note["body"] == "The build is green; deploy when ready."
    assert note["created_at"].endswith("Z")
    assert note["position"] == 1
    assert note["exchanges_left"] == 19
    conversation = Conversation.objects.get(public_id=body["conversation_id"])
    assert conversation.cap == 20
    assert conversation.notes_count == 1
    row = note_row(response)
    assert row.conversation == conversation
    assert row.next_workspace == alice.workspace
    assert row.recipient is None
    assert row.delivery == "next"
    assert row.delivered_at is None
    assert participant_names(body["conversation_id"]) == {"alice"}


def test_next_named_explicitly_is_the_same_as_omitting_to(alice):
    response = leave(alice, body="hello", to="next")

    assert response.status_code == 201
    assert response.json()["delivery"] == "next"
    assert response.json()["note"]["to"] == "next"
    assert note_row(response).next_workspace == alice.workspace


def test_each_new_thread_gets_its_own_conversation_id(alice):
    first = leave(alice, body="one").json()["conversation_id"]
    second = leave(alice, body="two").json()["conversation_id"]

    assert first != second
    assert Conversation.objects.count() == 2


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


# --- check_messages --------------------------------------------------------------------


def test_check_messages_delivers_oldest_first_and_marks_each_note_delivered(alice, bob, carol):
    sent = [
        leave(alice, body="one", to="bob").json()["note"]["id"],
        leave(carol, body="two", to="bob").json()["note"]["id"],
        leave(alice, body="three", to="bob").json()["note"]["id"],
    ]

    response = check(bob)

    assert response.status_code == 200
    assert set(response.json()) == {"notes"}
    assert ids(response.json()["notes"]) == sent
    assert [n["body"] for n in response.json()["notes"]] == ["one", "two", "three"]
    for note in Note.objects.filter(public_id__in=sent):
        assert note.delivered_at is not None
        assert note.delivered_to == bob
    assert check(bob).json() == {"notes": []}


@pytest.mark.parametrize("wait", ["31", "30.5", "-1", "-0.1", "abc", "nan", "inf"])
def test_check_messages_refuses_a_wait_that_is_not_a_number_from_0_to_30(bob, wait):
    response = check(bob, wait=wait)

    assert_refused(response, 400, "validation_error")
    assert "wait" in response.json()["error"]["details"]


def test_check_messages_with_wait_returns_an_empty_list_when_nothing_arrives(bob):
    response = check(bob, wait="0.2")

    assert response.status_code == 200
    assert response.json() == {"notes": []}


def test_check_messages_with_wait_returns_at_once_when_a_note_is_already_pending(alice, bob):
    note_id = leave(alice, body="ping", to="bob").json()["note"]["id"]

    started = time.monotonic()
    response = check(bob, wait="30")
    elapsed = time.monotonic() - started

    assert response.status_code == 200
    assert ids(response.json()["notes"]) == [note_id]
    assert elapsed < 10


@pytest.mark.django_db(transaction=True)
def test_check_messages_with_wait_returns_as_soon_as_a_note_arrives(workspace):
    alice = SessionFactory(workspace=workspace, name="alice")
    bob = SessionFactory(workspace=workspace, name="bob")

    def send_later() -> None:
        try:
            time.sleep(0.3)
            leave(alice, body="arrived while you waited", to="bob")
        finally:
            connection.close()  # this thread's own connection

    sender = threading.Thread(target=send_later)
    started = time.monotonic()
    sender.start()
    try:
        response = check(bob, wait="20")
    finally:
        sender.join(timeout=30)
    elapsed = time.monotonic() - started

    assert response.status_code == 200
    assert [n["body"] for n in response.json()["notes"]] == ["arrived while you waited"]
    assert elapsed < 10
    assert Note.objects.get().delivered_to == bob


def test_check_messages_runs_a_fixed_number_of_queries_however_many_notes_are_pending(
    alice, bob, carol
):
    leave(alice, body="one", to="bob")
    with CaptureQueriesContext(connection) as one:
        assert len(check(bob).json()["notes"]) == 1
    for i in range(4):
        leave(carol, body=f"more {i}", to="bob")
    with CaptureQueriesContext(connection) as four:
        assert len(check(bob).json()["notes"]) == 4

    assert len(four) == len(one)


# --- replies ---------------------------------------------------------------------------


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
    assert received[0]["from"] == {"name": "alice", "workspace": "main", "project": project.slug}


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


# --- recipients and bodies -----------------------------------------------------------------


def test_a_note_to_a_name_in_another_workspace_of_the_same_project_needs_no_opt_in(alice, project):
    dave = SessionFactory(workspace=WorkspaceFactory(project=project, slug="other"), name="dave")

    response = leave(alice, body="hello from main", to="dave")

    assert response.status_code == 201, response.json()
    assert response.json()["delivery"] == "session"
    assert ids(check(dave).json()["notes"]) == [response.json()["note"]["id"]]


def test_a_note_to_an_unknown_name_is_refused(alice, workspace):
    before = stored()

    refused = leave(alice, body="hello", to="bob", idempotency_key="k1")

    assert_refused(refused, 404, "recipient_not_found")
    assert stored() == before
    SessionFactory(workspace=workspace, name="bob")
    assert leave(alice, body="hello", to="bob", idempotency_key="k1").status_code == 201


def test_a_body_over_16384_utf8_bytes_is_refused_though_it_has_fewer_characters(alice, bob):
    body = "é" * 8192 + "a"  # 8193 characters, 16385 bytes of UTF-8
    assert len(body) < 16384 < len(body.encode("utf-8"))
    before = stored()

    refused = leave(alice, body=body, to="bob", idempotency_key="k1")

    assert_refused(refused, 413, "body_too_large")
    assert stored() == before
    assert leave(alice, body=body[:-1], to="bob", idempotency_key="k1").status_code == 201


# A short password glued to "-p" after mysql becomes "-p[REDACTED:password_assignment]":
# each 11-byte line grows to 39 bytes once scrubbed (SPEC §3.2: the limit holds for
# what is stored).
GROWING_LINE = "mysql -px9\n"
SCRUBBED_LINE = "mysql -p[REDACTED:password_assignment]\n"


def test_a_body_that_scrubbing_grows_past_the_limit_is_refused_with_stored_bytes(alice, bob):
    body = GROWING_LINE * 500  # 5,500 bytes sent, 19,500 once scrubbed
    assert len(body.encode("utf-8")) <= limits.BODY_MAX_BYTES
    before = stored()

    refused = leave(alice, body=body, to="bob", idempotency_key="k1")

    assert_refused(refused, 413, "body_too_large")
    assert refused.json()["error"]["details"]["stored_bytes"] == len(SCRUBBED_LINE) * 500
    assert stored() == before
    assert leave(alice, body="hello", to="bob", idempotency_key="k1").status_code == 201


@pytest.mark.parametrize(("tail", "accepted"), [("abcd", True), ("abcde", False)])
def test_the_stored_limit_is_16384_bytes_of_the_scrubbed_body(alice, bob, tail, accepted):
    body = GROWING_LINE * 420 + tail  # scrubbed: 16,380 bytes plus the tail
    before = stored()

    response = leave(alice, body=body, to="bob")

    if accepted:
        assert response.status_code == 201, response.json()
        assert note_row(response).body == SCRUBBED_LINE * 420 + tail
        assert len(note_row(response).body.encode("utf-8")) == limits.BODY_MAX_BYTES
    else:
        assert_refused(response, 413, "body_too_large")
        assert response.json()["error"]["details"]["stored_bytes"] == limits.BODY_MAX_BYTES + 1
        assert stored() == before


@pytest.mark.parametrize(
    "body",
    ["é" * 8192, "€" * 5461 + "a", "a" * 16384],
    ids=["two-byte", "three-byte", "ascii"],
)
def test_a_body_of_exactly_16384_utf8_bytes_is_accepted_whole(alice, bob, body):
    assert len(body.encode("utf-8")) == 16384

    response = leave(alice, body=body, to="bob")

    assert response.status_code == 201, response.json()["error"]
    assert note_row(response).body == body
    assert check(bob).json()["notes"][0]["body"] == body


def test_a_one_byte_body_is_accepted(alice, bob):
    response = leave(alice, body="k", to="bob")

    assert response.status_code == 201
    assert note_row(response).body == "k"


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"body": ""}, "body"),
        ({"body": "before\x00after"}, "body"),
        ({"body": 42}, "body"),
        ({"body": ["a list"]}, "body"),
        ({"body": None}, "body"),
        ({}, "body"),
        ({"body": "hello", "to": 42}, "to"),
        ({"body": "hello", "to": ["bob"]}, "to"),
        ({"body": "hello", "to": ""}, "to"),
        ({"body": "hello", "conversation_id": 7}, "conversation_id"),
    ],
    ids=[
        "empty-body",
        "nul-in-body",
        "number-body",
        "list-body",
        "null-body",
        "missing-body",
        "number-to",
        "list-to",
        "empty-to",
        "number-conversation-id",
    ],
)
def test_a_malformed_note_is_a_validation_error_and_leaves_its_key_unused(
    alice, bob, payload, field
):
    before = stored()

    refused = leave(alice, **payload, idempotency_key="k1")

    assert_refused(refused, 400, "validation_error")
    assert field in refused.json()["error"]["details"]
    assert stored() == before
    assert leave(alice, body="hello", to="bob", idempotency_key="k1").status_code == 201


@pytest.mark.parametrize(
    "key",
    ["k" * 129, "", "tab\there", "new\nline", "bell\x07", "café", 42],
    ids=["too-long", "empty", "tab", "newline", "control", "non-ascii", "number"],
)
def test_a_malformed_idempotency_key_is_a_validation_error(alice, bob, key):
    before = stored()

    refused = leave(alice, body="hello", to="bob", idempotency_key=key)

    assert_refused(refused, 400, "validation_error")
    assert "idempotency_key" in refused.json()["error"]["details"]
    assert stored() == before


def test_an_idempotency_key_of_128_printable_characters_is_accepted(alice, bob):
    key = ("printable ~!" * 11)[:128]

    response = leave(alice, body="hello", to="bob", idempotency_key=key)

    assert response.status_code == 201
    assert note_row(response).idempotency_key == key


# --- idempotency -------------------------------------------------------------------------


def test_a_retry_with_the_same_key_and_body_replays_the_original_note(alice, bob):
    first = leave(alice, body="deploy done", to="bob", idempotency_key="deploy-1")
    before = stored()

    retry = leave(alice, body="deploy done", to="bob", idempotency_key="deploy-1")

    assert retry.status_code == 200, retry.json()
    body = retry.json()
    assert body["replayed"] is True
    assert body["note"]["id"] == first.json()["note"]["id"]
    assert body["conversation_id"] == first.json()["conversation_id"]
    assert body["delivery"] == "session"
    assert body["exchanges_left"] == 19
    assert body["notes"] == []
    assert stored() == before
    assert len(check(bob).json()["notes"]) == 1


def test_a_retry_of_a_reply_with_the_same_key_replays_it(alice, bob):
    conversation_id = leave(alice, body="q", to="bob").json()["conversation_id"]
    first = leave(bob, body="a", conversation_id=conversation_id, idempotency_key="r1")

    retry = leave(bob, body="a", conversation_id=conversation_id, idempotency_key="r1")

    assert retry.status_code == 200
    assert retry.json()["replayed"] is True
    assert retry.json()["note"]["id"] == first.json()["note"]["id"]
    assert Conversation.objects.get(public_id=conversation_id).notes_count == 2


def test_an_idempotency_key_belongs_to_the_name_not_the_session(alice, bob, workspace):
    first = leave(alice, body="hello", to="bob", idempotency_key="k1")
    services.session_end(alice)
    alice_again = session_from(start_session(workspace, name="alice"))

    retry = leave(alice_again, body="hello", to="bob", idempotency_key="k1")

    assert retry.status_code == 200
    assert retry.json()["replayed"] is True
    assert retry.json()["note"]["id"] == first.json()["note"]["id"]
    assert Note.objects.count() == 1


def test_the_same_key_with_a_different_body_is_refused(alice, bob):
    first = leave(alice, body="version one", to="bob", idempotency_key="k1")
    before = stored()

    refused = leave(alice, body="version two", to="bob", idempotency_key="k1")

    assert_refused(refused, 409, "idempotency_key_reused")
    assert refused.json()["error"]["details"]["note_id"] == first.json()["note"]["id"]
    assert stored() == before
    assert note_row(first).body == "version one"


def test_the_same_key_with_a_different_recipient_is_refused(alice, bob, carol):
    leave(alice, body="hello", to="bob", idempotency_key="k1")
    before = stored()

    refused = leave(alice, body="hello", to="carol", idempotency_key="k1")

    assert_refused(refused, 409, "idempotency_key_reused")
    assert stored() == before
    assert check(carol).json()["notes"] == []


def test_the_same_key_naming_next_after_a_named_recipient_is_refused(alice, bob):
    leave(alice, body="hello", to="bob", idempotency_key="k1")
    before = stored()

    refused = leave(alice, body="hello", to="next", idempotency_key="k1")

    assert_refused(refused, 409, "idempotency_key_reused")
    assert stored() == before


def test_the_same_key_on_a_new_thread_without_to_after_a_named_recipient_is_refused(alice, bob):
    # Omitting `to` on a new thread means "next" (SPEC §3.2), a different
    # recipient from bob, so this is not a retry of the first request.
    leave(alice, body="hello", to="bob", idempotency_key="k1")
    before = stored()

    refused = leave(alice, body="hello", idempotency_key="k1")

    assert_refused(refused, 409, "idempotency_key_reused")
    assert stored() == before


def test_the_same_key_in_a_different_conversation_is_refused(alice, bob):
    first_thread = leave(alice, body="a", to="bob").json()["conversation_id"]
    second_thread = leave(alice, body="b", to="bob").json()["conversation_id"]
    leave(alice, body="same", conversation_id=first_thread, idempotency_key="k1")
    before = stored()

    refused = leave(alice, body="same", conversation_id=second_thread, idempotency_key="k1")

    assert_refused(refused, 409, "idempotency_key_reused")
    assert stored() == before


def test_idempotency_keys_are_per_sender_name(alice, bob, carol):
    mine = leave(alice, body="hello", to="carol", idempotency_key="shared")

    theirs = leave(bob, body="hello", to="carol", idempotency_key="shared")

    assert theirs.status_code == 201, theirs.json()
    assert theirs.json()["replayed"] is False
    assert theirs.json()["note"]["id"] != mine.json()["note"]["id"]
    assert Note.objects.filter(idempotency_key="shared").count() == 2


# --- secret scrubbing ------------------------------------------------------------------------


def test_a_github_token_is_scrubbed_before_storage_and_everywhere_it_is_shown(alice, bob):
    original = f"Use {GITHUB_TOKEN} to push, then ping me."
    redacted = "Use [REDACTED:github_token] to push, then ping me."

    response = leave(alice, body=original, to="bob")

    assert response.status_code == 201
    assert response.json()["scrubbed"] == [{"kind": "github_token", "count": 1}]
    assert response.json()["note"]["body"] == redacted
    assert note_row(response).body == redacted
    assert not Note.objects.filter(body__contains=GITHUB_TOKEN).exists()
    delivered = check(bob)
    assert delivered.json()["notes"][0]["body"] == redacted
    thread = history(alice, response.json()["conversation_id"])
    assert thread.json()["conversation"]["notes"][0]["body"] == redacted
    for reply in (response, delivered, thread):
        assert GITHUB_TOKEN not in reply.content.decode()


def test_ordinary_prose_and_hashes_are_stored_untouched(alice, bob):
    body = "Fixed in 3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a3f; see id 0b6f3c1e-5d2a-4c8e-9f1b."

    response = leave(alice, body=body, to="bob")

    assert response.json()["scrubbed"] == []
    assert note_row(response).body == body


# --- the conversation list -------------------------------------------------------------------


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


# --- thread history ------------------------------------------------------------------------


def test_a_thread_shows_all_its_notes_in_order_to_its_participants(alice, bob):
    conversation_id = leave(alice, body="one", to="bob").json()["conversation_id"]
    leave(bob, body="two", conversation_id=conversation_id)
    leave(alice, body="three", conversation_id=conversation_id)

    response = history(bob, conversation_id)

    assert response.status_code == 200
    thread = response.json()["conversation"]
    assert thread["id"] == conversation_id
    assert [n["position"] for n in thread["notes"]] == [1, 2, 3]
    assert [n["body"] for n in thread["notes"]] == ["one", "two", "three"]
    assert [n["from"]["name"] for n in thread["notes"]] == ["alice", "bob", "alice"]
    assert [n["to"] for n in thread["notes"]] == ["bob", "alice", "bob"]
    assert all(set(n) >= NOTE_FIELDS for n in thread["notes"])
    assert all(n["conversation_id"] == conversation_id for n in thread["notes"])
    assert thread["cap"] == 20
    assert thread["notes_count"] == 3
    assert thread["exchanges_left"] == 17
    assert {p["name"] for p in thread["participants"]} == {"alice", "bob"}


def test_a_thread_is_refused_to_a_session_that_is_not_a_participant(alice, bob, carol):
    conversation_id = leave(alice, body="private", to="bob").json()["conversation_id"]

    response = history(carol, conversation_id)

    assert_refused(response, 403, "not_a_participant")
    assert "private" not in response.content.decode()


def test_an_unknown_thread_is_not_found(alice):
    assert_refused(history(alice, "cnv_doesnotexist"), 404, "conversation_not_found")


def test_reading_a_thread_does_not_deliver_notes_pending_for_someone_else(alice, bob, carol):
    conversation_id = leave(alice, body="hello bob", to="bob").json()["conversation_id"]
    leave(alice, body="hello carol", to="carol", conversation_id=conversation_id)

    for reader in (alice, carol):
        response = history(reader, conversation_id)
        assert response.status_code == 200
        assert "hello bob" in [n["body"] for n in response.json()["conversation"]["notes"]]

    pending_for_bob = Note.objects.get(body="hello bob")
    assert pending_for_bob.delivered_at is None
    assert ids(check(bob).json()["notes"]) == [pending_for_bob.public_id]


def test_reading_a_thread_delivers_the_readers_own_pending_notes_only_through_the_envelope(
    alice, bob
):
    # SPEC §2/§3.4: every successful call delivers, so the history call's
    # top-level `notes` carries the note once; the history itself marks nothing.
    conversation_id = leave(alice, body="hello bob", to="bob").json()["conversation_id"]
    note = Note.objects.get()

    first = history(bob, conversation_id)
    second = history(bob, conversation_id)

    assert ids(first.json()["notes"]) == [note.public_id]
    assert second.json()["notes"] == []
    assert [n["id"] for n in second.json()["conversation"]["notes"]] == [note.public_id]
    note.refresh_from_db()
    assert note.delivered_to == bob
    assert check(bob).json()["notes"] == []


def test_a_delivered_note_stays_in_the_thread_history(alice, bob):
    response = leave(alice, body="read me again", to="bob")
    check(bob)

    thread = history(bob, response.json()["conversation_id"]).json()["conversation"]

    assert [n["id"] for n in thread["notes"]] == [response.json()["note"]["id"]]
    assert thread["notes"][0]["body"] == "read me again"


def test_the_thread_history_runs_a_fixed_number_of_queries(alice, bob, carol):
    conversation_id = leave(alice, body="one", to="bob").json()["conversation_id"]
    check(bob)
    with CaptureQueriesContext(connection) as one:
        assert len(history(alice, conversation_id).json()["conversation"]["notes"]) == 1
    for i in range(4):
        leave(alice, body=f"more {i}", to="carol", conversation_id=conversation_id)
    check(carol)
    with CaptureQueriesContext(connection) as five:
        assert len(history(alice, conversation_id).json()["conversation"]["notes"]) == 5

    assert len(five) == len(one)


def test_a_new_thread_to_a_connected_peer_takes_five_statements(
    alice, bob, django_assert_num_queries
):
    # Authentication (which finds no note pending); the addressee with its
    # workspace and project, locked; the thread, inserted with its note counted;
    # the addressee's open session, locked; the note; both participants, in one;
    # on PostgreSQL the wake-up's NOTIFY, inside the transaction (common/wake.py).
    # (Plus the test transaction's savepoint pair.)
    wake_notify = 0 if connection.vendor == "sqlite" else 1
    with django_assert_num_queries(1 + 5 + wake_notify + 2) as captured:
        response = client_for(alice).post(
            "/api/v1/notes/", {"to": "bob", "body": "hi"}, format="json"
        )
    assert response.status_code == 201, response.json()
    assert response.json()["delivery"] == "session"
    inserts = [q["sql"].split('"')[1] for q in captured if q["sql"].startswith("INSERT")]
    assert inserts == ["mailbox_conversation", "mailbox_note", "mailbox_participant"]
    assert not [q for q in captured if q["sql"].startswith("UPDATE")]
    assert set(
        Participant.objects.filter(
            conversation__public_id=response.json()["conversation_id"]
        ).values_list("name__handle", "has_written")
    ) == {("alice", True), ("bob", False)}
