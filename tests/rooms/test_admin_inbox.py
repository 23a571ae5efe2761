"""A person's inbox in the admin (SPEC §5.1; issue 28, item 3): notes to their handle
from any project, mentions across rooms, the unread count on every page, a thread
that delivers its notes once when opened (never on HEAD), and the reply form.
"""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse

from mailbox.models import AgentName, Note, Person
from rooms import services
from tests.conftest import client_for
from tests.factories import AgentNameFactory, ProjectFactory, SessionFactory, WorkspaceFactory

pytestmark = pytest.mark.django_db

INBOX = reverse("admin:people_inbox")


def html(response) -> str:
    return response.content.decode()


def thread_url(conversation_id: str) -> str:
    return reverse("admin:people_thread", args=[conversation_id])


def unread(page: str) -> int:
    found = re.search(r'data-plumb-unread[^>]*title="(\d+) unread"', page)
    assert found, "no unread count in the header"
    return int(found.group(1))


def note_to(session, to: str, body: str, **fields) -> dict:
    response = client_for(session).post(
        "/api/v1/notes/", {"to": to, "body": body, **fields}, format="json"
    )
    assert response.status_code == 201, response.content
    return response.json()


@pytest.fixture
def ada_client(client, django_user_model):
    user = django_user_model.objects.create_user("ada", password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name="participants"))
    client.force_login(user)
    client.get(INBOX)  # the first visit claims the handle "ada"
    return client


@pytest.fixture
def zed(db):
    """An agent of another project, which has opted in to nothing."""
    far = WorkspaceFactory(project=ProjectFactory(slug="far"), slug="main")
    return SessionFactory(workspace=far, name="zed")


def test_the_first_visit_claims_the_username_as_handle(ada_client):
    person = Person.objects.get()
    assert (person.user.username, person.name.handle, person.name.kind) == ("ada", "ada", "human")
    assert "@ada" in html(ada_client.get(INBOX))


def test_a_username_that_is_an_agents_name_chooses_a_handle_and_cannot_take_an_agents(
    client, django_user_model, alice
):
    user = django_user_model.objects.create_user("alice", password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name="participants"))
    client.force_login(user)

    response = client.get(INBOX)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:people_handle"))
    refused = client.post(reverse("admin:people_handle"), {"handle": "alice", "next": INBOX})
    assert "an agent&#x27;s name" in html(refused)
    assert AgentName.objects.get(handle="alice").kind == "agent"
    chosen = client.post(reverse("admin:people_handle"), {"handle": "alice.h", "next": INBOX})
    assert chosen.status_code == 302
    assert chosen["Location"] == INBOX
    assert Person.objects.get().name.handle == "alice.h"


def test_notes_from_any_project_fill_the_inbox_and_the_header_counts_them(ada_client, alice, zed):
    note_to(alice, "ada", "Can you unblock the review of #42?")
    note_to(zed, "ada", "Which of us owns parser.py?")

    page = html(ada_client.get(INBOX))

    assert unread(page) == 2
    assert page.count("1 new") == 2
    assert "@alice" in page
    assert "@zed" in page
    assert unread(html(ada_client.get(reverse("admin:rooms_room_changelist")))) == 2


def test_opening_a_thread_delivers_its_notes_once_and_the_count_falls(ada_client, alice, zed):
    asked = note_to(alice, "ada", "Can you unblock the review of #42?")
    note_to(zed, "ada", "Which of us owns parser.py?")

    page = html(ada_client.get(thread_url(asked["conversation_id"])))

    assert "Can you unblock the review of #42?" in page
    assert 'plumb-badge-warn">new' in page
    assert unread(page) == 1
    sent = client_for(alice).get("/api/v1/notes/sent/").json()["sent"]
    assert sent[0]["state"] == "delivered"
    assert sent[0]["delivered_to"] == {"name": "ada", "kind": "human"}
    again = html(ada_client.get(thread_url(asked["conversation_id"])))
    assert 'plumb-badge-warn">new' not in again
    assert Note.objects.filter(recipient__handle="ada", delivered_at__isnull=True).count() == 1


def test_head_on_a_thread_is_refused_and_delivers_nothing(ada_client, alice):
    asked = note_to(alice, "ada", "Still there?")
    response = ada_client.head(thread_url(asked["conversation_id"]))
    assert response.status_code == 405
    assert Note.objects.get(public_id=asked["note"]["id"]).delivered_at is None
    assert ada_client.head(INBOX).status_code == 405


def test_the_reply_form_answers_in_the_thread_once_however_often_it_is_sent(ada_client, alice):
    asked = note_to(alice, "ada", "Who owns parser.py?")
    url = thread_url(asked["conversation_id"])
    page = html(ada_client.get(url))
    key = re.search(r'name="idempotency_key" value="([^"]+)"', page).group(1)

    for _ in range(2):
        answered = ada_client.post(
            url, {"body": "You do.\r\nBob takes lexer.py.", "idempotency_key": key}
        )
        assert answered.status_code == 302

    received = client_for(alice).get("/api/v1/notes/").json()["notes"]
    assert [n["body"] for n in received] == ["You do.\nBob takes lexer.py."]
    assert received[0]["from"]["kind"] == "human"
    assert received[0]["conversation_id"] == asked["conversation_id"]


def test_a_refused_answer_is_the_forms_error(ada_client, alice):
    alice.workspace.project.max_exchanges = 1
    alice.workspace.project.save()
    asked = note_to(alice, "ada", "Yes or no?")
    url = thread_url(asked["conversation_id"])
    response = ada_client.post(url, {"body": "Yes.", "idempotency_key": "admin-k"})
    assert response.status_code == 200
    assert "(conversation_exhausted)" in html(response)
    empty = ada_client.post(url, {"body": "", "idempotency_key": "admin-k2"})
    assert "Must not be empty." in html(empty)


def test_a_thread_with_several_others_asks_whom_to_answer(ada_client, alice, bob):
    asked = note_to(alice, "ada", "bob, ada: who takes it?")
    note_to(alice, "bob", "(see ada's answer)", conversation_id=asked["conversation_id"])
    url = thread_url(asked["conversation_id"])
    page = html(ada_client.get(url))
    assert '<select name="to"' in page
    ada_client.post(url, {"body": "bob does.", "to": "bob", "idempotency_key": "admin-k"})
    assert Note.objects.get(sender_name__handle="ada").recipient.handle == "bob"


def test_someone_elses_thread_is_not_found(ada_client, alice, bob):
    private = note_to(alice, "bob", "between us")
    assert ada_client.get(thread_url(private["conversation_id"])).status_code == 404


def test_mentions_are_listed_and_stop_counting_once_the_inbox_showed_them(ada_client, alice):
    services.room_create(alice, slug="ops")
    ada_client.post(
        reverse("admin:rooms_room_transcript", args=[services.room_join(alice, "ops").room.pk]),
        {"talk": "post", "body": "I'm in.", "idempotency_key": "admin-1", "after_seq": "1"},
    )
    services.message_send(alice, "ops", body="@ada can you approve the release?")

    counted = html(ada_client.get(reverse("admin:index")))
    assert unread(counted) == 1
    inbox = html(ada_client.get(INBOX))
    assert "#ops" in inbox
    assert "can you approve the release?" in inbox
    assert unread(html(ada_client.get(INBOX))) == 0


def test_the_pulse_says_the_unread_count_and_the_pages_state(ada_client, alice):
    asked = note_to(alice, "ada", "ping")
    pulse = reverse("admin:people_pulse")
    assert ada_client.get(pulse).json() == {"unread": 1, "state": ""}
    thread = ada_client.get(f"{pulse}?thread={asked['conversation_id']}").json()
    assert thread["state"] == "1"
    assert ada_client.head(pulse).status_code == 405


def test_a_person_leaves_a_handle_behind_them(ada_client):
    person = Person.objects.get()
    person.user.delete()
    assert AgentName.objects.get(handle="ada").kind == "human"
    assert not Person.objects.exists()


def test_a_reserved_agent_name_is_refused_as_a_handle_too(client, django_user_model):
    AgentNameFactory(handle="builder")
    user = django_user_model.objects.create_user("builder", password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name="participants"))
    client.force_login(user)
    assert client.get(INBOX).status_code == 302
    assert not Person.objects.exists()
