"""People's handles and notes (SPEC §1 Person, §5.1; issue 28, items 1, 3 and 4).

A person acts through a name of kind ``human`` and a session the admin keeps
for them (``mailbox.services.people``): one namespace with agents' names, no
token that works, notes delivered thread by thread when they open it.
"""

import pytest

from common import limits
from common.errors import ValidationFailed
from mailbox import selectors, services
from mailbox.errors import (
    AlreadyExists,
    ConversationExhausted,
    CrossProjectRefused,
    InvalidName,
    MailboxDisabled,
    NameTaken,
    WorkspaceNotFound,
)
from mailbox.models import AgentName, AuditRecord, Note, Person, ProjectKey, Session
from mailbox.services import note_leave, notes_claim
from rooms.activity import activity_by_project
from tests.conftest import assert_error, client_for
from tests.factories import (
    PersonFactory,
    ProjectFactory,
    SessionFactory,
    UserFactory,
    WorkspaceFactory,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def ada():
    """A person whose username, ``Ada``, makes the handle ``ada``."""
    return PersonFactory(user=UserFactory(username="Ada"))


def note_to(session: Session, to: str, body: str = "Which of us owns parser.py?") -> dict:
    response = client_for(session).post("/api/v1/notes/", {"to": to, "body": body}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


# --- handles: one namespace ------------------------------------------------------------


def test_a_person_gets_their_username_lower_cased_and_a_session_that_is_no_connection(ada):
    name = ada.name
    assert (name.handle, name.kind) == ("ada", "human")
    assert name.workspace.project.slug == limits.PEOPLE_PROJECT
    session = ada.session
    assert session.name_id == name.pk
    assert session.ended_at is not None
    assert session.end_reason == Session.EndReason.PERSON
    assert session.project_key is None
    assert not session.is_connected()
    assert not Session.objects.connected().filter(pk=session.pk).exists()
    assert AuditRecord.objects.filter(action="person.handle", target="name ada").exists()


@pytest.mark.parametrize("username", ["Ada Lovelace", "next", "plumb", "-ada", "ada@example.com"])
def test_a_username_that_is_no_handle_leaves_the_choice_to_the_person(username):
    assert services.check_person_handle(UserFactory(username=username)) is None


def test_a_username_an_agent_holds_leaves_the_choice_to_the_person(agent_session):
    assert services.check_person_handle(UserFactory(username="Alice")) is None


def test_an_agents_name_cannot_become_a_persons_handle(agent_session):
    user = UserFactory(username="someone")
    with pytest.raises(NameTaken, match="an agent's name"):
        services.person_claim(user, handle="alice", actor="admin:someone")
    assert not Person.objects.exists()
    assert AgentName.objects.get(handle="alice").kind == "agent"


def test_a_persons_handle_cannot_be_claimed_twice_nor_changed(ada):
    with pytest.raises(NameTaken, match="a person's handle"):
        services.person_claim(UserFactory(username="other"), handle="ada", actor="admin:other")
    with pytest.raises(AlreadyExists):
        services.person_claim(ada.user, handle="lovelace", actor="admin:Ada")
    again = services.person_claim(ada.user, handle="ada", actor="admin:Ada")
    assert again.pk == ada.pk
    assert Person.objects.count() == 1


def test_a_malformed_or_reserved_handle_is_a_validation_error():
    user = UserFactory(username="someone")
    for handle in ("Ada", "next", "a b"):
        with pytest.raises(InvalidName) as refused:
            services.person_claim(user, handle=handle, actor="admin:someone")
        assert refused.value.code == "validation_error"
        assert "handle" in refused.value.details


def test_an_agent_session_cannot_take_a_persons_handle(ada, key_client):
    response = key_client.post(
        "/api/v1/sessions/", {"workspace": "main", "name": "ada"}, format="json"
    )
    error = assert_error(response, 409, "name_taken")
    assert "person's handle" in error["message"]
    assert AgentName.objects.get(handle="ada").kind == "human"


def test_plumb_connect_cannot_reserve_a_persons_handle(ada, workspace):
    with pytest.raises(NameTaken, match="person's handle"):
        services.name_reserve(workspace, "ada", actor="cli:root")


def test_a_generated_name_is_never_a_persons_handle(ada, project_key, monkeypatch):
    draws = iter(["ada", "swift-otter-42"])
    monkeypatch.setattr("mailbox.services.sessions._generated_handles", lambda width: [next(draws)])
    started = services.session_start(project_key, workspace_slug="main")
    assert started.session.name.handle == "swift-otter-42"


def test_no_key_is_issued_and_no_agent_starts_in_the_peoples_project(ada):
    home = ada.name.workspace
    with pytest.raises(ValidationFailed):
        services.key_create(home.project, label="sneaky", created_by="admin:ops")
    assert not ProjectKey.objects.filter(project=home.project).exists()
    # A key of that project could only come from a direct write; even then no session starts.
    forged = ProjectKey.objects.create(project=home.project, prefix="forged00", key_hash="x")
    with pytest.raises(WorkspaceNotFound):
        services.session_start(forged, workspace_slug=limits.PEOPLE_WORKSPACE, name="bob")
    with pytest.raises(ValidationFailed):
        services.name_reserve(home, "bob", actor="cli:root")


def test_the_home_page_counts_no_person_as_connected(ada, agent_session):
    activity = activity_by_project()
    assert activity.total.connected == 1
    people = next(p for p in activity.projects if p.slug == limits.PEOPLE_PROJECT)
    assert people.connected == 0


# --- notes to and from people ----------------------------------------------------------


def test_an_agent_of_any_project_leaves_a_person_a_note_that_waits_for_their_name(ada):
    far = WorkspaceFactory(project=ProjectFactory(slug="far", max_exchanges=7), slug="main")
    zed = SessionFactory(workspace=far, name="zed")

    left = note_to(zed, "ada")

    assert left["delivery"] == "name"
    assert left["exchanges_left"] == 6  # the agent's project's cap, not the people's
    note = Note.objects.get(public_id=left["note"]["id"])
    assert (note.recipient.handle, note.bound_session_id) == ("ada", None)
    assert left["note"]["state"] == "waiting"


def test_opening_a_thread_delivers_its_notes_once_and_the_sender_sees_a_human(ada, alice, bob):
    first = note_to(alice, "ada", "Please unblock the review of #42.")
    other = note_to(bob, "ada", "Who owns parser.py?")
    thread = selectors.conversation_get_for_session(ada.session, first["conversation_id"])

    delivered = notes_claim(ada.session, conversation=thread)

    assert [n.public_id for n in delivered] == [first["note"]["id"]]
    assert notes_claim(ada.session, conversation=thread) == []
    sent = client_for(alice).get("/api/v1/notes/sent/").json()["sent"]
    assert sent[0]["state"] == "delivered"
    assert sent[0]["delivered_to"] == {"name": "ada", "kind": "human"}
    still = client_for(bob).get("/api/v1/notes/sent/").json()["sent"]
    assert (still[0]["id"], still[0]["state"]) == (other["note"]["id"], "waiting")


def test_a_persons_answer_reaches_the_agent_as_a_note_from_a_human(ada, alice):
    asked = note_to(alice, "ada")
    thread = selectors.conversation_get_for_session(ada.session, asked["conversation_id"])
    notes_claim(ada.session, conversation=thread)

    answer = note_leave(
        ada.session, body="You do; bob takes lexer.py.", conversation_id=thread.public_id
    )

    assert answer.delivery == "session"  # alice is connected
    received = client_for(alice).get("/api/v1/notes/").json()["notes"]
    assert [n["body"] for n in received] == ["You do; bob takes lexer.py."]
    assert received[0]["from"] == {
        "name": "ada",
        "workspace": None,
        "project": None,
        "kind": "human",
    }
    listed = client_for(alice).get("/api/v1/conversations/").json()["conversations"][0]
    ada_there = next(p for p in listed["participants"] if p["name"] == "ada")
    assert ada_there == {"name": "ada", "workspace": None, "project": None, "kind": "human"}


def test_a_person_answers_across_projects_without_an_opt_in(ada):
    far = SessionFactory(
        workspace=WorkspaceFactory(project=ProjectFactory(slug="far"), slug="main"), name="zed"
    )
    asked = note_to(far, "ada")
    left = note_leave(ada.session, body="Done.", conversation_id=asked["conversation_id"])
    assert left.note.recipient.handle == "zed"


def test_an_agent_still_needs_an_opt_in_to_reach_another_projects_agent(alice):
    far = SessionFactory(
        workspace=WorkspaceFactory(project=ProjectFactory(slug="far"), slug="main"), name="zed"
    )
    with pytest.raises(CrossProjectRefused):
        note_leave(far, body="hi", to="alice")


@pytest.mark.parametrize("to", [None, "next"])
def test_a_persons_new_note_names_its_recipient(ada, to):
    with pytest.raises(ValidationFailed) as refused:
        note_leave(ada.session, body="hello", to=to)
    assert "to" in refused.value.details
    assert not Note.objects.exists()


def test_a_persons_answer_sent_twice_with_one_key_is_stored_once(ada, alice):
    asked = note_to(alice, "ada")
    for _ in range(2):
        left = note_leave(
            ada.session, body="Yes.", conversation_id=asked["conversation_id"], idempotency_key="k1"
        )
    assert left.replayed is True
    assert Note.objects.filter(sender_name=ada.name).count() == 1


def test_a_persons_answer_obeys_the_thread_cap(ada, alice):
    alice.workspace.project.max_exchanges = 2
    alice.workspace.project.save()
    asked = note_to(alice, "ada")
    note_leave(ada.session, body="One.", conversation_id=asked["conversation_id"])
    with pytest.raises(ConversationExhausted):
        note_leave(ada.session, body="Two.", conversation_id=asked["conversation_id"])


def test_the_peoples_mailbox_switch_stops_notes_to_and_from_people(ada, alice):
    asked = note_to(alice, "ada")
    home = ada.name.workspace.project
    services.project_update(home, actor="admin:ops", mailbox_enabled=False)
    ada.session.workspace.project.refresh_from_db()
    with pytest.raises(MailboxDisabled):
        note_leave(ada.session, body="Yes.", conversation_id=asked["conversation_id"])
    refused = client_for(alice).post("/api/v1/notes/", {"to": "ada", "body": "?"}, format="json")
    assert_error(refused, 403, "mailbox_disabled")
