"""Secret scrubbing through the HTTP API (SPEC 3.5): what leaked in issue 23 stays out.

Tokens glued to a word or to each other, and tokens in fullwidth letters or
with zero-width characters inside.

Each secret is posted as a note body, a room message, a room's title and topic
and a display name; the response reports its kind and no row holds it.
"""

import pytest

from common import limits
from mailbox.models import Note
from rooms.models import Event, Member, Message, Room
from tests.conftest import client_for
from tests.mailbox.test_scrubbing import GITHUB_CLASSIC, GITLAB_DEPLOY, GITLAB_PAT, STRIPE_LIVE
from tests.mailbox.test_scrubbing_glue import GITHUB_GLUED
from tests.mailbox.test_scrubbing_glue import GLUED as GLUED_LINES
from tests.mailbox.test_scrubbing_lookalikes import FW_GITHUB, ZW_GITHUB

pytestmark = pytest.mark.django_db

NOTES = "/api/v1/notes/"
ROOMS = "/api/v1/rooms/"

# (kind, text, secret): texts short enough for a room title.
LEAKS = [
    ("github_token", f"bot: token{GITHUB_GLUED}", GITHUB_GLUED),
    ("github_token", f"bot: {ZW_GITHUB}", ZW_GITHUB),
    ("github_token", f"bot: {FW_GITHUB}", FW_GITHUB),
    *((kind, line, secret) for kind, line, secret in GLUED_LINES if line.startswith("abc")),
]


@pytest.fixture(autouse=True)
def _no_rate_limits(settings):
    # Each test makes several calls in a row.
    settings.PLUMB_RATE_SESSION = None


@pytest.mark.parametrize(("kind", "text", "secret"), LEAKS)
def test_a_note_body_is_stored_and_delivered_without_the_secret(alice, bob, kind, text, secret):
    response = client_for(alice).post(NOTES, {"to": "bob", "body": text}, format="json")

    assert response.status_code == 201, response.content
    assert response.json()["scrubbed"] == [{"kind": kind, "count": 1}]
    assert response.json()["note"]["body"] == text.replace(secret, f"[REDACTED:{kind}]")
    assert not Note.objects.filter(body__contains=secret).exists()
    delivered = client_for(bob).get(NOTES)
    assert delivered.json()["notes"][0]["body"] == response.json()["note"]["body"]
    for reply in (response, delivered):
        assert secret not in reply.content.decode()


@pytest.mark.parametrize(("kind", "text", "secret"), LEAKS)
def test_a_room_title_topic_display_name_and_message_are_stored_without_the_secret(
    alice, kind, text, secret
):
    client = client_for(alice)
    display_name = text if len(text) <= limits.DISPLAY_NAME_MAX else "ci"
    created = client.post(
        ROOMS,
        {"slug": "general", "title": text, "topic": text, "display_name": display_name},
        format="json",
    )
    sent = client.post(f"{ROOMS}general/messages/", {"body": text}, format="json")

    assert created.status_code == 201, created.content
    assert sent.status_code == 201, sent.content
    assert created.json()["scrubbed"][0]["kind"] == kind
    assert sent.json()["scrubbed"] == [{"kind": kind, "count": 1}]
    redacted = text.replace(secret, f"[REDACTED:{kind}]")
    room = Room.objects.get(slug="general")
    assert (room.title, room.topic, Message.objects.get().body) == (redacted, redacted, redacted)
    assert Member.objects.get(room=room).display_name == display_name.replace(
        secret, f"[REDACTED:{kind}]"
    )
    tail = secret[-16:]
    rows = [
        *Room.objects.values_list("title", "topic"),
        *Member.objects.values_list("display_name"),
        *Event.objects.values_list("actor_display_name"),
        *Message.objects.values_list("body"),
    ]
    assert not any(tail in value for row in rows for value in row)
    for reply in (created, sent):
        assert tail not in reply.content.decode()


def test_tokens_pasted_back_to_back_are_each_stored_and_reported_as_redacted(alice, bob):
    tokens = [GITHUB_GLUED, GITHUB_CLASSIC, STRIPE_LIVE, GITLAB_PAT, GITLAB_DEPLOY]
    text = "bot: token" + "".join(tokens)

    response = client_for(alice).post(NOTES, {"to": "bob", "body": text}, format="json")

    assert response.status_code == 201, response.content
    assert response.json()["scrubbed"] == [
        {"kind": "github_token", "count": 2},
        {"kind": "stripe_key", "count": 1},
        {"kind": "gitlab_token", "count": 2},
    ]
    assert response.json()["note"]["body"] == (
        "bot: token[REDACTED:github_token][REDACTED:github_token][REDACTED:stripe_key]"
        "[REDACTED:gitlab_token][REDACTED:gitlab_token]"
    )
    for token in tokens:
        assert not Note.objects.filter(body__contains=token[-12:]).exists()
        assert token[-12:] not in response.content.decode()
