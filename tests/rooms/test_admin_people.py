"""A person in the admin (SPEC §5.1; issue 28): the ``participants`` group, the compose
box and review buttons of a room's transcript, and their form errors in the API's words.
The inbox and threads are in ``test_admin_inbox.py``.
"""

from __future__ import annotations

import re
import time

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse

from mailbox.models import Person
from rooms import services
from rooms.models import Event, Member, Message, Room
from tests.conftest import client_for
from tests.factories import SessionFactory, UserFactory, participants_group
from tests.rooms.messaging import GITHUB_TOKEN, REDACTED

pytestmark = pytest.mark.django_db

CHANGELISTS = {
    "project": reverse("admin:mailbox_project_changelist"),
    "projectkey": reverse("admin:mailbox_projectkey_changelist"),
    "crossprojectoptin": reverse("admin:mailbox_crossprojectoptin_changelist"),
    "conversation": reverse("admin:mailbox_conversation_changelist"),
    "auditrecord": reverse("admin:mailbox_auditrecord_changelist"),
}


def participant(django_user_model, username="ada", **fields):
    user = django_user_model.objects.create_user(username, password="pw", is_staff=True, **fields)
    user.groups.add(participants_group())
    return user


@pytest.fixture
def ada_client(client, django_user_model):
    """Logged in as ``ada``, in the migration's ``participants`` group; no handle yet."""
    client.force_login(participant(django_user_model, first_name="Ada", last_name="L."))
    return client


@pytest.fixture
def room(alice, bob):
    """Room ``ops``: alice creates it (seq 1), bob joins (2), alice asks (3)."""
    services.room_create(alice, slug="ops", title="Operations")
    services.room_join(bob, "ops")
    services.message_send(alice, "ops", body="Who owns parser.py, @bob or me?")
    return Room.objects.get(slug="ops")


def transcript(room: Room) -> str:
    return reverse("admin:rooms_room_transcript", args=[room.pk])


def html(response) -> str:
    return response.content.decode()


def form_field(page: str, name: str) -> str:
    found = re.search(rf'name="{name}" value="([^"]*)"', page)
    assert found, f"no {name} in the form"
    return found.group(1)


def compose(client, room: Room, body: str, **fields) -> object:
    page = html(client.get(transcript(room)))
    data = {
        "talk": "post",
        "body": body,
        "idempotency_key": form_field(page, "idempotency_key"),
        "after_seq": form_field(page, "after_seq"),
        **fields,
    }
    return client.post(transcript(room), data), data


# --- the participants group --------------------------------------------------------------


def test_the_participants_group_may_read_rooms_and_take_part_and_nothing_more():
    group = Group.objects.get(name="participants")
    codenames = set(group.permissions.values_list("codename", flat=True))
    assert codenames == {"view_room", "view_member", "view_message", "view_event", "take_part"}
    moderators = set(
        Group.objects.get(name="moderators").permissions.values_list("codename", flat=True)
    )
    assert "take_part" in moderators


@pytest.mark.parametrize("model", sorted(CHANGELISTS))
def test_a_participant_gets_403_on_projects_keys_optins_and_what_they_do_not_moderate(
    ada_client, model
):
    assert ada_client.get(CHANGELISTS[model]).status_code == 403


@pytest.mark.parametrize(
    ("model", "action"),
    [("message", "hide_messages"), ("member", "mute_members"), ("room", "lock_rooms")],
)
def test_a_participant_gets_403_on_moderation_actions(ada_client, room, model, action):
    target = {
        "message": Message.objects.first(),
        "member": Member.objects.first(),
        "room": room,
    }[model]
    response = ada_client.post(
        reverse(f"admin:rooms_{model}_changelist"),
        {"action": action, "_selected_action": [str(target.pk)], "reason": "no", "index": "0"},
    )
    assert response.status_code == 403
    assert not Event.objects.filter(kind="moderation").exists()


def test_a_participants_index_says_who_they_are_and_where_to_take_part(ada_client):
    body = html(ada_client.get(reverse("admin:index")))
    assert '<span class="plumb-role">participant</span>' in body
    assert "Take part" in body
    assert "Moderation" not in body
    assert reverse("admin:people_inbox") in body


# --- the compose box -----------------------------------------------------------------------


def test_the_transcript_offers_a_person_the_compose_box_and_review_buttons(ada_client, room):
    page = html(ada_client.get(transcript(room)))
    assert "Post as <span" in page
    assert "@ada" in page
    assert 'name="require_read"' in page
    assert page.count('value="approve"') == 2  # one message: its buttons and its comment form
    assert not Person.objects.exists()  # reading claims no handle


def test_a_person_posts_from_the_transcript_and_is_joined_first(ada_client, room, alice):
    response, _ = compose(ada_client, room, f"You do, alice. Also: {GITHUB_TOKEN}")

    message = Message.objects.get(author__handle="ada")
    assert response.status_code == 302
    assert response["Location"].endswith(f"#seq-{message.seq}")
    assert message.body == f"You do, alice. Also: {REDACTED}"
    assert list(room.events.order_by("seq").values_list("kind", flat=True)) == [
        "join",
        "join",
        "message",
        "join",
        "message",
    ]
    assert Member.objects.get(room=room, name__handle="ada").display_name == "Ada L."
    read = client_for(alice).get("/api/v1/rooms/ops/messages/").json()["events"]
    assert read[-1]["message"]["author"]["kind"] == "human"


def test_a_compose_form_sent_twice_stores_one_message(ada_client, room):
    first, data = compose(ada_client, room, "Settled: alice owns parser.py.")
    second = ada_client.post(transcript(room), data)
    assert (first.status_code, second.status_code) == (302, 302)
    assert Message.objects.filter(author__handle="ada").count() == 1


@pytest.mark.parametrize(
    ("body", "shown"),
    [
        ("   ", "Must not be empty."),
        ("x" * 16385, "body is 16385 bytes of UTF-8; the limit is 16384. (body_too_large)"),
    ],
)
def test_the_apis_refusals_are_the_forms_errors_and_join_nobody(ada_client, room, body, shown):
    response, _ = compose(ada_client, room, body)
    assert response.status_code == 200
    assert shown in html(response)
    assert not Member.objects.filter(name__handle="ada").exists()


def test_require_read_refuses_a_post_over_news_and_the_page_shows_it(ada_client, room, alice):
    page = html(ada_client.get(transcript(room)))
    services.message_send(alice, "ops", body="Actually, bob just took it.")
    response = ada_client.post(
        transcript(room),
        {
            "talk": "post",
            "body": "alice owns it.",
            "require_read": "on",
            "idempotency_key": form_field(page, "idempotency_key"),
            "after_seq": form_field(page, "after_seq"),
        },
    )
    body = html(response)
    assert response.status_code == 200
    assert "1 new message or review arrived" in body
    assert "Actually, bob just took it." in body
    assert form_field(body, "after_seq") == str(Room.objects.get(pk=room.pk).head_seq)
    assert "alice owns it.</textarea>" in body
    assert not Message.objects.filter(author__handle="ada").exists()


def test_a_reply_link_fills_the_compose_box(ada_client, room):
    asked = Message.objects.get(seq=3)
    page = html(ada_client.get(f"{transcript(room)}?reply_to={asked.public_id}"))
    assert "Replying to" in page
    assert 'href="#seq-3"' in page
    compose(ada_client, room, "Me.", reply_to=asked.public_id)
    assert Message.objects.get(author__handle="ada").reply_to_id == asked.pk


def test_a_locked_room_refuses_with_the_apis_code(ada_client, room):
    services.room_lock(room, actor="admin:ops", reason="freeze")
    response, _ = compose(ada_client, room, "hello")
    assert "(room_locked)" in html(response)


def test_a_username_that_makes_no_handle_is_sent_to_choose_one(client, django_user_model, room):
    client.force_login(participant(django_user_model, username="Ada Lovelace"))
    page = html(client.get(transcript(room)))
    assert "Choose your handle" in page
    response = client.post(transcript(room), {"talk": "post", "body": "hi"})
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:people_handle"))


def test_staff_who_may_not_take_part_see_no_compose_box_and_cannot_post(
    client, django_user_model, room
):
    viewer = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(
        *Group.objects.get(name="participants").permissions.exclude(codename="take_part")
    )
    client.force_login(viewer)
    assert "plumb-compose" not in html(client.get(transcript(room)))
    assert client.post(transcript(room), {"talk": "post", "body": "hi"}).status_code == 403


# --- review buttons -----------------------------------------------------------------------


def test_a_review_button_reviews_once_however_often_it_is_sent(ada_client, room, alice):
    page = html(ada_client.get(transcript(room)))
    asked = Message.objects.get(seq=3)
    data = {
        "talk": "review",
        "message_id": asked.public_id,
        "verdict": "approve",
        "idempotency_key": form_field(page, "idempotency_key").replace("admin-", "admin-r-"),
    }
    for _ in range(2):
        assert ada_client.post(transcript(room), data).status_code == 302
    reviews = Event.objects.filter(room=room, kind="review")
    assert [(e.actor.handle, e.verdict) for e in reviews] == [("ada", "approve")]
    read = client_for(alice).get("/api/v1/rooms/ops/messages/").json()["events"]
    assert read[-1]["actor"]["kind"] == "human"


def test_a_refused_review_is_said_on_the_page(ada_client, room):
    services.room_lock(room, actor="admin:ops", reason="freeze")
    response = ada_client.post(
        transcript(room),
        {
            "talk": "review",
            "message_id": Message.objects.get(seq=3).public_id,
            "verdict": "approve",
            "idempotency_key": "admin-x",
        },
        follow=True,
    )
    assert "Review refused" in html(response)
    assert "room_locked" in html(response)


# --- reading and waking ----------------------------------------------------------------------


def test_opening_the_transcript_moves_a_members_read_position_and_head_does_not(
    ada_client, room, alice
):
    compose(ada_client, room, "I'm here.")
    services.message_send(alice, "ops", body="Thanks!")
    member = Member.objects.get(room=room, name__handle="ada")
    before = member.read_seq
    assert ada_client.head(transcript(room)).status_code == 200
    member.refresh_from_db()
    assert member.read_seq == before
    ada_client.get(transcript(room))
    member.refresh_from_db()
    assert member.read_seq == Room.objects.get(pk=room.pk).head_seq
    receipts = client_for(alice).get(
        f"/api/v1/rooms/ops/messages/{Message.objects.last().public_id}/"
    )
    assert "ada" in receipts.json()["read_by"]


@pytest.mark.django_db(transaction=True)
def test_a_waiting_agent_is_woken_by_a_persons_post_at_once(client, django_user_model):
    from tests.rooms.test_waiting import Waiter

    alice = SessionFactory(name="alice")
    services.room_create(alice, slug="ops")
    client.force_login(participant(django_user_model))
    # Messages only: the person's join (the event before it) would wake a wait for anything.
    waiter = Waiter(alice, lambda s: services.events_read(s, "ops", kinds=["message"], wait=60))
    waiter.start()
    time.sleep(0.3)  # parked on its wait

    room = Room.objects.get(slug="ops")
    page = html(client.get(transcript(room)))
    started = time.monotonic()
    response = client.post(
        transcript(room),
        {
            "talk": "post",
            "body": "Go ahead, alice.",
            "idempotency_key": form_field(page, "idempotency_key"),
            "after_seq": form_field(page, "after_seq"),
        },
    )
    read = waiter.result()
    woken = time.monotonic() - started

    assert response.status_code == 302
    print(f"woken {woken * 1000:.0f} ms after the admin's POST began")
    assert woken < 2
    message = next(e.message for e in read.events if e.message_id is not None)
    assert (message.author.handle, message.author.kind) == ("ada", "human")


def test_the_unread_count_costs_one_query(django_assert_num_queries, ada_client, room):
    from rooms.selectors.people import person_unread

    ada_client.get(reverse("admin:people_inbox"))  # claims the handle
    user = Person.objects.get().user
    with django_assert_num_queries(1):
        person_unread(user.pk)


def test_a_user_with_no_staff_status_is_not_a_person(client, django_user_model):
    user = UserFactory(username="nostaff", is_staff=False)
    user.groups.add(Group.objects.get(name="participants"))
    client.force_login(user)
    assert client.get(reverse("admin:people_inbox")).status_code == 302  # to the login
