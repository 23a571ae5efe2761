"""Room guarantees under races that are made to happen (tests/races.py), on both databases.

Each test holds one service's transaction open at its critical point while a
second connection acts, then lets the first go on, and checks the guarantee
against what both committed.
"""

from __future__ import annotations

import pytest

from rooms import services
from rooms.models import Member, Message
from tests.factories import SessionFactory, WorkspaceFactory
from tests.races import race

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def room_of_three():
    workspace = WorkspaceFactory(slug="races")
    alice, bob, carol = (
        SessionFactory(workspace=workspace, name=n) for n in ("alice", "bob", "carol")
    )
    services.room_create(alice, slug="race")
    services.room_join(bob, "race")
    services.room_join(carol, "race")
    return alice, bob, carol


def test_a_send_that_waited_for_the_room_sees_the_send_it_waited_for(room_of_three):
    alice, bob, carol = room_of_three
    first, second, state = race(
        "send.locked",
        lambda: services.message_send(bob, "race", body="from bob"),
        lambda: services.message_send(alice, "race", body="from alice"),
    )
    bob_sent, alice_sent = first.outcome(), second.outcome()
    assert state == "blocked"
    ordinals = sorted(Message.objects.filter(room__slug="race").values_list("ordinal", flat=True))
    assert ordinals == [1, 2]
    # Alice posted after Bob's message was committed and had not read it.
    assert alice_sent.unseen_before_send == 1
    assert bob_sent.unseen_before_send == 0
    alice_member = Member.objects.get(room__slug="race", name__handle="alice")
    assert alice_member.read_seq < bob_sent.message.seq
    # A third member counts both messages as unseen, not one.
    rooms = {r.slug: r for r in services_room_list(carol)}
    assert rooms["race"].my_unseen == 2


def services_room_list(session):
    from rooms.selectors import room_list_for_session

    return room_list_for_session(session)
