"""Searching messages and notes in the admin (SPEC §9): the changelists find words of the
body through the agents' index (hidden messages too, for moderators), show each match
in a snippet, and still find by id and name."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from mailbox import services as mailbox_services
from rooms import services
from rooms.models import Message

pytestmark = pytest.mark.django_db


def changelist(client, model: str, q: str):
    app = "mailbox" if model == "note" else "rooms"
    response = client.get(reverse(f"admin:{app}_{model}_changelist"), {"q": q})
    assert response.status_code == 200
    return response


def found(response) -> list[str]:
    return sorted(obj.body for obj in response.context["cl"].result_list)


@pytest.fixture
def lab(alice, bob):
    services.room_create(alice, slug="lab")
    services.room_join(bob, "lab")
    for body in [
        "The cache key must include the tenant.",
        "The cachekey helper is unrelated.",
        "Décision: <script>alert(1)</script> the cache stays.",
        "Rotate the key before the release.",
    ]:
        services.message_send(alice, "lab", body=body)


def test_message_search_finds_words_phrases_and_prefixes_through_the_index(admin_client, lab):
    assert found(changelist(admin_client, "message", '"cache key"')) == [
        "The cache key must include the tenant."
    ]
    assert found(changelist(admin_client, "message", "decision -tenant")) == [
        "Décision: <script>alert(1)</script> the cache stays."
    ]
    assert found(changelist(admin_client, "message", "cachek*")) == [
        "The cachekey helper is unrelated."
    ]


def test_a_hidden_message_is_still_found_by_moderators(admin_client, lab):
    message = Message.objects.get(body__startswith="Rotate")
    services.message_hide(message, actor="admin:mod", reason="spoiler")
    assert found(changelist(admin_client, "message", "rotate release")) == [message.body]


def test_each_result_shows_its_matches_marked_and_escaped(admin_client, lab):
    page = changelist(admin_client, "message", "cache decision").content.decode()
    assert (
        "<mark>Décision</mark>: &lt;script&gt;alert(1)&lt;/script&gt; the <mark>cache</mark>"
        in page
    )
    assert "<script>alert(1)" not in page


def test_ids_and_names_are_still_found_beside_words(admin_client, lab, alice):
    message = Message.objects.get(body__startswith="Rotate")
    assert found(changelist(admin_client, "message", message.public_id)) == [message.body]
    assert len(found(changelist(admin_client, "message", "alice"))) == 4


def test_a_malformed_query_searches_ids_and_names_and_says_why(admin_client, lab):
    response = changelist(admin_client, "message", '"alice')
    assert found(response) == []
    warnings = [str(m) for m in response.context["messages"]]
    assert any("quote is left open" in w for w in warnings), warnings


def test_note_search_finds_words_and_shows_them(admin_client, alice, bob):
    mailbox_services.note_leave(alice, body="Handing over: staging migration done", to="bob")
    mailbox_services.note_leave(bob, body="thanks, nothing else", to="alice")

    response = changelist(admin_client, "note", "migrat* staging")

    assert found(response) == ["Handing over: staging migration done"]
    assert "<mark>staging</mark> <mark>migration</mark>" in response.content.decode()
    assert found(changelist(admin_client, "note", "bob")) == ["thanks, nothing else"]


def test_a_search_costs_the_same_with_few_or_many_matches(admin_client, alice, bob, settings):
    settings.PLUMB_SEEN_WRITE_INTERVAL = 3600
    services.room_create(alice, slug="many")

    def statements(model: str) -> int:
        with CaptureQueriesContext(connection) as captured:
            changelist(admin_client, model, "counted")
        return len(captured)

    services.message_send(alice, "many", body="counted once")
    mailbox_services.note_leave(alice, body="counted once", to="bob")
    few = statements("message"), statements("note")
    for i in range(30):
        services.message_send(alice, "many", body=f"counted {i}")
        mailbox_services.note_leave(alice, body=f"counted {i}", to="bob")
    assert (statements("message"), statements("note")) == few
