"""Mentions over HTTP: how an ``@handle`` in a sent message resolves, warns or stays
unresolved, and ``GET /api/v1/mentions/``, the caller's mentions across rooms.

The extraction and resolution rules themselves are test_mentions.py.
"""

from __future__ import annotations

import pytest

from rooms.models import Message, MessageMention
from tests.conftest import assert_error
from tests.rooms.messaging import MESSAGE_FIELDS, create_room, join, leave, mentions_of, post, send

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("_no_rate_limits")]


def test_an_at_handle_of_a_member_resolves_to_that_member(alice, bob, general):
    response = send(alice, body="@bob can you review?")

    bob_mention = {"handle": "bob", "display_name": "Bob", "display_name_visible": "Bob"}
    assert response.json()["mentions"] == [bob_mention]
    assert response.json()["message"]["mentions"] == [bob_mention]
    assert response.json()["unresolved_mentions"] == []
    assert response.json()["mention_warnings"] == []
    message = Message.objects.get(public_id=response.json()["message"]["id"])
    assert list(MessageMention.objects.values_list("message", "name")) == [
        (message.pk, bob.name_id)
    ]


def test_a_misspelled_mention_is_unresolved_exactly_as_typed_once_each(alice, general):
    response = send(alice, body="@nobdy, @Nobdy and @nobdy again, and @bob")

    assert response.json()["unresolved_mentions"] == ["@nobdy", "@Nobdy"]
    assert [m["handle"] for m in response.json()["mentions"]] == ["bob"]


def test_an_at_handle_inside_code_is_not_a_mention(alice, general):
    body = "Call `@bob` here.\n\n```\n@bob\n```\n\n    @bob indented"

    response = send(alice, body=body)

    assert response.json()["mentions"] == []
    assert response.json()["unresolved_mentions"] == []
    assert not MessageMention.objects.exists()


def test_an_email_address_is_not_a_mention(alice, general):
    response = send(alice, body="Mail me@example.com or https://host/@bob")

    assert response.json()["mentions"] == []
    assert response.json()["unresolved_mentions"] == []


def test_a_mention_of_an_agent_outside_the_room_is_unresolved(alice, carol, general):
    response = send(alice, body="@carol please join")

    assert response.json()["mentions"] == []
    assert response.json()["unresolved_mentions"] == ["@carol"]
    assert not MessageMention.objects.exists()


def test_a_mention_of_a_member_who_left_is_unresolved(alice, bob, carol, general):
    join(carol)
    leave(carol)

    response = send(alice, body="@carol are you there?")

    assert response.json()["mentions"] == []
    assert response.json()["unresolved_mentions"] == ["@carol"]


def test_a_handle_typed_with_an_invisible_character_resolves_with_a_warning(alice, general):
    response = send(alice, body="@bo\u200bb look")

    assert [m["handle"] for m in response.json()["mentions"]] == ["bob"]
    assert response.json()["unresolved_mentions"] == []
    assert response.json()["mention_warnings"] == [
        {"typed": "@bo\u200bb", "handle": "bob", "reason": "invisible_characters"}
    ]


def test_a_cyrillic_look_alike_does_not_resolve_and_warns_it_is_confusable(alice, general):
    response = send(alice, body="@b\u043eb look")

    assert response.json()["mentions"] == []
    assert response.json()["unresolved_mentions"] == ["@b\u043eb"]
    assert response.json()["mention_warnings"] == [
        {"typed": "@b\u043eb", "handle": "bob", "reason": "confusable"}
    ]
    assert not MessageMention.objects.exists()


def test_a_resolved_mention_shows_the_members_display_name_visibly(alice, carol, general):
    join(carol, display_name="Car\u200bol \u202eadmin")

    response = send(alice, body="@carol hello")

    assert response.json()["mentions"] == [
        {
            "handle": "carol",
            "display_name": "Car\u200bol \u202eadmin",
            "display_name_visible": "Car<U+200B>ol <U+202E>admin",
        }
    ]


def test_display_names_never_resolve_a_mention_only_handles_do(alice, carol, general):
    assert create_room(alice, "side").status_code == 201
    join(carol, "side", display_name="bob")

    response = send(alice, "side", body="@bob are you here?")

    assert response.json()["mentions"] == []
    assert response.json()["unresolved_mentions"] == ["@bob"]


def test_the_mentions_list_shows_messages_mentioning_the_caller_across_rooms_oldest_first(
    alice, bob, general
):
    assert create_room(alice, "second").status_code == 201
    join(bob, "second")
    one = post(alice, "@bob one")
    post(alice, "no mention here")
    two = post(alice, "@bob two", slug="second")
    post(bob, "@alice not for bob")
    three = post(alice, "@Bob three")

    response = mentions_of(bob)

    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"mentions", "has_more", "notes"}
    assert [m["id"] for m in body["mentions"]] == [one["id"], two["id"], three["id"]]
    assert [m["room"] for m in body["mentions"]] == ["general", "second", "general"]
    assert all(set(m) == MESSAGE_FIELDS for m in body["mentions"])
    assert body["has_more"] is False
    assert [m["id"] for m in mentions_of(alice).json()["mentions"]] == [
        Message.objects.get(body="@alice not for bob").public_id
    ]


def test_the_mentions_list_pages_with_after_id_and_has_more(alice, bob, general):
    ids = [post(alice, f"@bob number {i}")["id"] for i in range(3)]

    first = mentions_of(bob, limit=2)
    rest = mentions_of(bob, limit=2, after_id=first.json()["mentions"][-1]["id"])

    assert [m["id"] for m in first.json()["mentions"]] == ids[:2]
    assert first.json()["has_more"] is True
    assert [m["id"] for m in rest.json()["mentions"]] == ids[2:]
    assert rest.json()["has_more"] is False


@pytest.mark.parametrize("after_id", ["msg_unknown", "other-message"])
def test_the_mentions_list_refuses_an_after_id_that_is_no_mention_of_the_caller(
    alice, bob, general, after_id
):
    post(alice, "@bob hi")
    not_mine = post(bob, "@alice hi")["id"]

    response = mentions_of(bob, after_id=not_mine if after_id == "other-message" else after_id)

    assert_error(response, 404, "message_not_found")


@pytest.mark.parametrize("limit", [0, 201, "many"])
def test_the_mentions_list_refuses_a_bad_limit(alice, limit):
    assert_error(mentions_of(alice, limit=limit), 400, "validation_error")
