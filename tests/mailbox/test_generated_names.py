"""Generated names (SPEC §3.1 "the server generates a readable free one") never run out.

They come from a space that cannot run out (``adjective-animal-NN``, then
more digits), and a generated name nobody came to rely on is freed once its
sessions are over, so that connecting without a name again and again does not
use up the readable ones. A name that holds history (a note, a thread, a
room) is never freed: whoever got it next would read or receive what was the
old holder's.
"""

from __future__ import annotations

import re
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.conf import settings
from django.utils import timezone
from rest_framework.test import APIClient

from mailbox import services
from mailbox.models import AgentName, FreedToken, Participant, Session
from mailbox.services.sessions import FREED_TOKENS_KEPT
from rooms import services as room_services
from rooms.models import Member
from tests.conftest import assert_error, client_for
from tests.factories import SessionFactory

pytestmark = pytest.mark.django_db

SHORT = "amber-badger-10"  # the one short name when every draw is the first word and number
WIDE = "amber-badger-1000"  # the same draw with four digits


@pytest.fixture
def one_short_name(monkeypatch):
    """The generator's draws, fixed: the first adjective, animal and number every time.

    The short form then holds one name, ``amber-badger-10``, so whether a
    start gets it again says whether it was freed.
    """
    fixed = SimpleNamespace(choice=lambda words: words[0], randbelow=lambda _: 0)
    monkeypatch.setattr("mailbox.services.sessions.secrets", fixed)


def start(client: APIClient, **body):
    return client.post("/api/v1/sessions/", {"workspace": "main", **body}, format="json")


def started_session(response) -> Session:
    assert response.status_code == 201, response.json()
    session = Session.objects.get(public_id=response.json()["session"]["id"])
    session.raw_token = response.json()["token"]
    return session


def over(handle: str, *, ended: bool = True) -> None:
    """The name's sessions went quiet longer ago than a session lives (and ended, or expired)."""
    past = timezone.now() - timedelta(seconds=settings.PLUMB_SESSION_TTL + 1)
    sessions = Session.objects.filter(name__handle=handle)
    if ended:
        sessions.update(last_seen_at=past, ended_at=past, end_reason=Session.EndReason.ENDED)
    else:
        sessions.update(last_seen_at=past)


# --- a space that cannot run out --------------------------------------------------------


def test_a_start_still_gets_a_readable_name_when_every_short_one_is_taken(
    key_client, workspace, monkeypatch
):
    monkeypatch.setattr("mailbox.services.sessions._ADJECTIVES", ["amber"])
    monkeypatch.setattr("mailbox.services.sessions._ANIMALS", ["otter"])
    # Every short name (amber-otter-10 ... amber-otter-99) is chosen and held.
    AgentName.objects.bulk_create(
        AgentName(handle=f"amber-otter-{n}", workspace=workspace) for n in range(10, 100)
    )

    response = start(key_client)

    assert response.status_code == 201, response.json()
    name = response.json()["session"]["name"]
    assert re.fullmatch(r"amber-otter-[1-9]\d{3}", name), name
    assert AgentName.objects.count() == 91
    assert AgentName.objects.get(handle=name).disposable


def test_a_start_draws_a_longer_name_while_the_short_one_is_in_use(key_client, one_short_name):
    first = start(key_client).json()["session"]["name"]
    second = start(key_client).json()["session"]["name"]
    third = start(key_client).json()["session"]["name"]

    assert (first, second) == (SHORT, WIDE)
    assert third == "amber-badger-100000"
    assert Session.objects.filter(ended_at__isnull=True).count() == 3


def test_the_widest_generated_name_is_still_a_valid_handle():
    from mailbox.services import sessions

    longest = max(sessions._ADJECTIVES, key=len) + "-" + max(sessions._ANIMALS, key=len) + "-"
    widest = longest + "9" * max(sessions._NUMBER_WIDTHS)
    assert services.handle_check(widest) == widest


# --- freed once its sessions are over -----------------------------------------------------


def test_a_generated_name_whose_session_ended_is_freed_and_drawn_again(key_client, one_short_name):
    old = started_session(start(key_client))
    assert client_for(old).delete("/api/v1/sessions/current/").status_code == 200
    over(SHORT)

    new = started_session(start(key_client))

    assert new.name.handle == SHORT
    assert new.name_id != old.name_id
    assert list(AgentName.objects.values_list("handle", flat=True)) == [SHORT]
    assert list(Session.objects.values_list("pk", flat=True)) == [new.pk]
    # The old token knows nothing of the new holder: its session ended, and it
    # says so, as a token that existed (it never counts as a guess).
    assert_error(client_for(old).get("/api/v1/sessions/current/"), 401, "session_ended")


def test_a_freed_names_tokens_are_remembered_for_a_while_then_forgotten(key_client, one_short_name):
    old = started_session(start(key_client))
    over(SHORT)
    freed_at = timezone.now()
    assert services.names_free(now=freed_at) == 1
    assert list(FreedToken.objects.values_list("token_prefix", flat=True)) == [old.token_prefix]

    # Forgotten by the first freeing after that.
    later = started_session(start(key_client))
    over(later.name.handle)
    services.names_free(now=freed_at + FREED_TOKENS_KEPT + timedelta(seconds=1))

    assert list(FreedToken.objects.values_list("token_prefix", flat=True)) == [later.token_prefix]
    assert_error(client_for(old).get("/api/v1/sessions/current/"), 401, "invalid_token")


def test_an_expired_session_that_never_ended_frees_its_name_too(key_client, one_short_name):
    old = started_session(start(key_client))
    over(SHORT, ended=False)  # the client went away without ending it

    new = started_session(start(key_client))

    assert new.name.handle == SHORT
    assert not Session.objects.filter(pk=old.pk).exists()


def test_a_name_is_not_freed_while_its_session_ended_only_a_moment_ago(key_client, one_short_name):
    old = started_session(start(key_client))
    client_for(old).delete("/api/v1/sessions/current/")

    new = started_session(start(key_client))

    # A request the old session had begun may still be running: its name waits.
    assert new.name.handle == WIDE
    assert Session.objects.get(pk=old.pk).name.handle == SHORT


def test_a_connected_generated_name_is_never_freed(key_client, one_short_name):
    old = started_session(start(key_client))

    assert services.names_free() == 0
    assert started_session(start(key_client)).name.handle == WIDE
    assert client_for(old).get("/api/v1/sessions/current/").status_code == 200


def _sent_a_note(session: Session, alice: Session) -> None:
    services.note_leave(session, body="hello", to="alice")


def _received_a_note(session: Session, alice: Session) -> None:
    services.note_leave(alice, body="for you", to=session.name.handle)


def _joined_a_thread(session: Session, alice: Session) -> None:
    # A "next" note sent before it started, delivered to it: it joined the thread.
    services.note_leave(alice, body="whoever comes next")
    Session.objects.filter(pk=session.pk).update(notes_watermark=10**9)
    session.refresh_from_db()
    assert services.notes_claim(session)
    assert Participant.objects.filter(name=session.name).exists()


def _joined_a_room(session: Session, alice: Session) -> None:
    room_services.room_create(alice, slug="release")
    room_services.room_join(session, "release")


def _joined_and_left_a_room(session: Session, alice: Session) -> None:
    _joined_a_room(session, alice)
    room_services.room_leave(session, "release")
    assert Member.objects.get(name=session.name).left_at is not None


def _created_a_room(session: Session, alice: Session) -> None:
    room_services.room_create(session, slug="scratch")


def _ended_by_an_operator(session: Session, alice: Session) -> None:
    # The audit trail now names it ("session ses_... of amber-badger-10").
    services.session_end(session, actor="admin:root")


@pytest.mark.parametrize(
    "history",
    [
        _sent_a_note,
        _received_a_note,
        _joined_a_thread,
        _joined_a_room,
        _joined_and_left_a_room,
        _created_a_room,
        _ended_by_an_operator,
    ],
    ids=lambda history: history.__name__.strip("_"),
)
def test_a_generated_name_that_holds_history_is_never_freed(
    history, key_client, workspace, one_short_name
):
    alice = SessionFactory(workspace=workspace, name="alice")
    old = started_session(start(key_client))
    history(old, alice)
    over(SHORT)

    new = started_session(start(key_client))

    assert new.name.handle == WIDE
    kept = AgentName.objects.get(handle=SHORT)
    assert kept.pk == old.name_id
    assert not kept.disposable  # found holding history: kept for good
    assert Session.objects.filter(pk=old.pk).exists()
    over(WIDE)
    assert services.names_free() == 1  # the unused one goes; the held one stays
    assert AgentName.objects.filter(handle=SHORT).exists()


def test_a_generated_name_later_claimed_by_name_is_never_freed(key_client, one_short_name):
    started_session(start(key_client))
    over(SHORT, ended=False)
    # The agent comes back asking for the name it was given: it relies on it now.
    again = started_session(start(key_client, name=SHORT))
    assert not AgentName.objects.get(handle=SHORT).disposable
    client_for(again).delete("/api/v1/sessions/current/")
    over(SHORT)

    assert services.names_free() == 0
    assert started_session(start(key_client)).name.handle == WIDE


def test_a_chosen_name_is_never_freed(key_client, workspace):
    bob = started_session(start(key_client, name="bob"))
    client_for(bob).delete("/api/v1/sessions/current/")
    over("bob")

    assert services.names_free() == 0
    assert AgentName.objects.filter(handle="bob").exists()


def test_names_free_frees_at_most_its_limit_per_call(key_client):
    handles = [start(key_client).json()["session"]["name"] for _ in range(3)]
    for handle in handles:
        over(handle)

    assert services.names_free(limit=2) == 2
    assert services.names_free(limit=2) == 1
    assert not AgentName.objects.exists()
    assert not Session.objects.exists()


def test_with_nothing_to_free_the_look_is_one_query(key_client, django_assert_num_queries):
    start(key_client)
    with django_assert_num_queries(1):
        assert services.names_free() == 0
