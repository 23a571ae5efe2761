"""Room guarantees under races that are made to happen (tests/races.py), on both databases.

Each test holds one service's transaction open at its critical point while a
second connection acts, then lets the first go on, and checks the guarantee
against what both committed.
"""

from __future__ import annotations

import pytest
from django.db import connection

from common import pause
from common.errors import PlumbError
from mailbox import services as mailbox_services
from mailbox.errors import CrossProjectRefused
from mailbox.models import CrossProjectOptIn
from rooms import mentions, services
from rooms.errors import UnreadMessages
from rooms.models import Event, Member, Message, MessageMention
from rooms.selectors import mentions_for_session
from tests.conftest import assert_error, client_for
from tests.factories import OptInFactory, ProjectFactory, SessionFactory, WorkspaceFactory
from tests.races import Racer, held_at, race

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


@pytest.mark.postgresql  # SQLite locks before the statement reads anything
def test_a_send_that_waited_reads_its_figures_again_and_one_that_did_not_reads_once(
    room_of_three, monkeypatch
):
    alice, bob, _ = room_of_three
    stale: list[str] = []
    monkeypatch.setattr(pause, "_hooks", {"send.figures_stale": lambda: stale.append("again")})
    services.message_send(bob, "race", body="alone")
    assert stale == []  # nobody held the room: one statement locked it and read

    # The wait itself: held by bob's send, alice's statement reads from before bob's commit.
    first, second, state = race(
        "send.locked",
        lambda: services.message_send(bob, "race", body="from bob"),
        lambda: services.message_send(alice, "race", body="from alice"),
    )

    assert state == "blocked"
    assert stale == ["again"]
    assert second.outcome().message.ordinal == first.outcome().message.ordinal + 1


def services_room_list(session):
    from rooms.selectors import room_list_for_session

    return room_list_for_session(session)[0]


def _member(handle: str) -> Member:
    return Member.objects.select_related("name", "room__project").get(
        room__slug="race", name__handle=handle
    )


@pytest.mark.parametrize(
    ("moderate", "code"),
    [
        (
            lambda: services.member_mute(_member("alice"), actor="admin:op", reason="spam"),
            "member_muted",
        ),
        (
            lambda: services.member_remove(_member("alice"), actor="admin:op", reason="spam"),
            "not_a_member",
        ),
        (
            lambda: services.room_lock(_member("alice").room, actor="admin:op", reason="calm"),
            "room_locked",
        ),
    ],
    ids=["mute", "remove", "lock"],
)
def test_a_send_that_waited_for_a_moderator_obeys_what_the_moderator_did(
    room_of_three, moderate, code
):
    alice, _, _ = room_of_three
    first, second, state = race(
        "moderation.changed",
        moderate,
        lambda: services.message_send(alice, "race", body="let me in"),
    )
    assert first.outcome() is not None
    assert state == "blocked"
    with pytest.raises(PlumbError) as refused:
        second.outcome()
    assert refused.value.code == code
    assert not Message.objects.filter(room__slug="race").exists()


def test_require_read_refuses_a_send_that_waited_for_another_message(room_of_three):
    alice, bob, _ = room_of_three
    head = Member.objects.get(room__slug="race", name__handle="alice").room.head_seq
    first, second, state = race(
        "send.locked",
        lambda: services.message_send(bob, "race", body="I take the release"),
        lambda: services.message_send(
            alice, "race", body="I take the release", after_seq=head, require_read=True
        ),
    )
    bob_sent = first.outcome()
    assert state == "blocked"
    with pytest.raises(UnreadMessages) as refused:
        second.outcome()
    assert refused.value.as_dict()["error"]["details"]["unseen_count"] == 1
    assert [m.public_id for m in Message.objects.filter(room__slug="race")] == [
        bob_sent.message.public_id
    ]


def test_two_retries_racing_with_one_idempotency_key_store_one_message(room_of_three):
    alice, _, _ = room_of_three
    send = lambda: services.message_send(  # noqa: E731
        alice, "race", body="deploy started", idempotency_key="deploy-1"
    )
    first, second, state = race("send.locked", send, send)
    one, two = first.outcome(), second.outcome()
    assert state == "blocked"
    assert one.message.public_id == two.message.public_id
    assert (one.replayed, two.replayed) == (False, True)
    assert Message.objects.filter(room__slug="race").count() == 1


# --- mentions resolved before the room lock (issue #15) ----------------------------------


def while_held(point, first, second):
    """``first`` held at ``point`` while ``second`` runs to its end; then ``first`` goes on.

    If ``first`` held a lock there that ``second`` needs, ``second`` would wait for it
    and fail (a timeout, or SQLite's "database is locked"). ``race`` tells blocked from
    done by looking, which can catch a thread passing through SQLite's writer queue.
    """
    with held_at(point) as held:
        one = Racer(first, name=f"first ({point})")
        one.start()
        held.wait_reached()
        two = Racer(second, name="second")
        two.start()
        second_result = two.outcome()
        held.release()
        return one.outcome(), second_result


@pytest.fixture
def resolutions(monkeypatch):
    """Whether each mention resolution ran inside a transaction (True) or before one."""
    seen: list[bool] = []
    resolve = mentions.resolve_mentions

    def watched(body, members):
        seen.append(connection.in_atomic_block)
        return resolve(body, members)

    monkeypatch.setattr(mentions, "resolve_mentions", watched)
    return seen


def test_mentions_are_resolved_before_the_send_takes_the_room_lock(room_of_three, resolutions):
    alice, _, _ = room_of_three
    in_transaction: list[str] = []

    def record(execute, sql, params, many, context):
        if connection.in_atomic_block:
            in_transaction.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        services.message_send(alice, "race", body="status?")
    without_mentions = len(in_transaction)
    in_transaction.clear()
    with connection.execute_wrapper(record):
        sent = services.message_send(alice, "race", body="@bob @carol status?")

    assert resolutions == [False]
    assert [m["handle"] for m in sent.mentions] == ["bob", "carol"]
    assert set(MessageMention.objects.values_list("name__handle", flat=True)) == {"bob", "carol"}
    # Under the lock, mentions add their insert and nothing else: no member look-up.
    assert len(in_transaction) == without_mentions + 1


def test_a_send_that_waited_for_a_message_keeps_the_mentions_it_resolved(
    room_of_three, resolutions
):
    alice, bob, _ = room_of_three
    # Resolving holds no lock: the other send goes through meanwhile.
    sent, _ = while_held(
        "send.mentions_resolved",
        lambda: services.message_send(alice, "race", body="@bob @carol ship it"),
        lambda: services.message_send(bob, "race", body="shipping"),
    )
    assert sent.message.seq == sent.latest_seq == 5
    assert [m["handle"] for m in sent.mentions] == ["bob", "carol"]
    # A message moved the head but changed no member: resolved once, before the lock.
    assert resolutions == [False]


def _leave(session):
    return lambda: services.room_leave(session, "race")


def _removed_by_operator(session):
    return lambda: services.member_remove(_member("bob"), actor="admin:op", reason="spam")


@pytest.mark.parametrize("departure", [_leave, _removed_by_operator], ids=["leave", "remove"])
def test_a_member_gone_while_a_send_resolved_its_mentions_is_not_mentioned(
    room_of_three, resolutions, departure
):
    alice, bob, _ = room_of_three
    sent, _ = while_held(
        "send.mentions_resolved",
        lambda: services.message_send(alice, "race", body="@bob @carol ship it"),
        departure(bob),
    )
    # As if resolved under the lock: bob was no member when the message was posted.
    assert [m["handle"] for m in sent.mentions] == ["carol"]
    assert sent.unresolved_mentions == ["@bob"]
    assert list(MessageMention.objects.values_list("name__handle", flat=True)) == ["carol"]
    assert mentions_for_session(bob, after_id=None, limit=10) == ([], False)
    # Resolved before the lock, then again under it once the members had changed.
    assert resolutions == [False, True]


def test_a_member_who_joined_while_a_send_resolved_its_mentions_is_mentioned(
    room_of_three, resolutions
):
    alice, _, _ = room_of_three
    dave = SessionFactory(workspace=alice.workspace, name="dave")
    sent, _ = while_held(
        "send.mentions_resolved",
        lambda: services.message_send(alice, "race", body="welcome @dave"),
        lambda: services.room_join(dave, "race"),
    )
    assert [m["handle"] for m in sent.mentions] == ["dave"]
    assert sent.unresolved_mentions == []
    assert [m.public_id for m in mentions_for_session(dave, after_id=None, limit=10)[0]] == [
        sent.message.public_id
    ]
    assert resolutions == [False, True]


# --- join vs opt-in revoke ----------------------------------------------------------------


@pytest.fixture
def guest_and_room():
    """Project q opted in to p; q has two rooms; p's pete is about to join one."""
    q, p = ProjectFactory(slug="q"), ProjectFactory(slug="p")
    quinn = SessionFactory(workspace=WorkspaceFactory(project=q, slug="qw"), name="quinn")
    pete = SessionFactory(workspace=WorkspaceFactory(project=p, slug="pw"), name="pete")
    OptInFactory(project=q, source=p)
    services.room_create(quinn, slug="lobby")
    services.room_create(quinn, slug="race")
    return q, p, pete


def test_a_join_committed_while_the_optin_was_revoked_is_removed(guest_and_room):
    q, p, pete = guest_and_room
    first, second, state = race(
        "room.joined",
        lambda: services.room_join(pete, "race"),
        lambda: mailbox_services.optin_revoke(q, source=p, actor="test"),
    )
    joined = first.outcome()
    second.outcome()
    assert joined.event is not None
    # The revocation waited for the room the join held, then saw the member.
    assert state == "blocked"
    member = Member.objects.get(room__slug="race", name__handle="pete")
    assert member.left_at is not None
    removal = Event.objects.filter(room__slug="race", kind="moderation").get()
    assert removal.data == {"action": "remove", "reason": "opt-in revoked", "member": "pete"}
    assert removal.seq == joined.event.seq + 1
    sent = client_for(pete).post("/api/v1/rooms/race/messages/", {"body": "hi"})
    assert_error(sent, 403, "not_a_member")
    assert not CrossProjectOptIn.objects.exists()


def test_a_join_that_waited_for_the_revocation_is_refused(guest_and_room):
    q, p, pete = guest_and_room
    first, second, state = race(
        "optin.rooms_locked",
        lambda: mailbox_services.optin_revoke(q, source=p, actor="test"),
        lambda: services.room_join(pete, "race"),
    )
    first.outcome()
    # The join waited for the room the revocation had locked, then read the opt-in gone.
    assert state == "blocked"
    with pytest.raises(CrossProjectRefused) as refused:
        second.outcome()
    assert (refused.value.status, refused.value.code) == (403, "cross_project_refused")
    assert not Member.objects.filter(room__slug="race", name__handle="pete").exists()
    # Nothing entered the room's stream but its creation.
    events = Event.objects.filter(room__slug="race").order_by("seq")
    assert list(events.values_list("kind", "actor__handle")) == [("join", "quinn")]
