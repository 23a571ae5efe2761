"""``plumb room list``, ``plumb message list`` and ``plumb note list`` (SPEC §5, issue 24
item 6): the ids the moderation actions take, found from the command line.

Listings are read the way a script reads them: split on runs of two or more
spaces, under their header row. What agents wrote (a room's title, a
message's first line) is shown with its control, bidi and invisible
characters written out.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from mailbox import services as mailbox_services
from mailbox.models import Conversation, Note
from rooms import services
from rooms.models import Message, Room
from tests.cli import plumb, plumb_fails
from tests.conftest import client_for
from tests.factories import ProjectFactory, SessionFactory, WorkspaceFactory

pytestmark = pytest.mark.django_db

ROOM_HEADER = ["ROOM", "PROJECT", "LATEST_SEQ", "MEMBERS", "STATE", "CREATED", "TITLE"]
MESSAGE_HEADER = ["SEQ", "MESSAGE", "AUTHOR", "CREATED", "STATE", "FIRST_LINE"]
NOTE_HEADER = ["CREATED", "NOTE", "CONVERSATION", "PROJECT", "FROM", "TO", "STATE", "DELIVERED"]
TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


@pytest.fixture(autouse=True)
def operator(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr("getpass.getuser", lambda: "ops-alice")
    return "cli:ops-alice"


def rows(out: str) -> list[list[str]]:
    """A listing's rows, header included, split as scripts split them."""
    return [re.split(r"\s{2,}", line) for line in out.splitlines()]


def listed(*args: str, queries: int) -> list[list[str]]:
    """Run a listing, holding it to ``queries`` queries, and return its rows."""
    with CaptureQueriesContext(connection) as captured:
        out, err = plumb(*args)
    assert err == ""
    assert len(captured) == queries, [q["sql"] for q in captured]
    return rows(out)


@pytest.fixture
def far(db):
    """A session in another project, ``far``."""
    return SessionFactory(
        workspace=WorkspaceFactory(project=ProjectFactory(slug="far")), name="fay"
    )


# --- room list --------------------------------------------------------------------------


@pytest.fixture
def rooms(alice, bob, far) -> dict[str, Room]:
    """``ops`` (alice and bob, locked), then ``news`` (alice, a title that hides things),
    then ``yonder`` in project ``far``."""
    services.room_create(alice, slug="ops", title="Operations")
    services.room_join(bob, "ops")
    services.message_send(alice, "ops", body="deploying now")
    services.room_lock(Room.objects.get(slug="ops"), actor="test", reason="freeze")
    services.room_create(alice, slug="news", title="evil\u202etxt.exe\u200b  \x1b[31mred")
    services.room_create(far, slug="yonder")
    return {room.slug: room for room in Room.objects.all()}


def test_room_list_shows_every_room_newest_first_with_its_state(rooms, alice):
    project = alice.workspace.project.slug

    listing = listed("room", "list", queries=1)

    title = "evil<U+202E>txt.exe<U+200B> <U+001B>[31mred"
    assert listing == [
        ROOM_HEADER,
        ["yonder", "far", "1", "1", "open", listing[1][5], "-"],
        ["news", project, "1", "1", "open", listing[2][5], title],
        ["ops", project, "4", "2", "locked", listing[3][5], "Operations"],
    ]
    assert all(TIME.match(row[5]) for row in listing[1:])


def test_room_list_narrows_to_a_project_and_a_limit(rooms, alice):
    project = alice.workspace.project.slug

    assert [row[0] for row in listed("room", "list", project, queries=2)[1:]] == ["news", "ops"]
    assert [row[0] for row in listed("room", "list", "--limit", "2", queries=1)[1:]] == [
        "yonder",
        "news",
    ]


def test_room_list_of_an_unknown_project_is_refused_naming_where_to_look(db):
    error = plumb_fails("room", "list", "nowhere")
    assert str(error).splitlines() == [
        "No project 'nowhere'. (project_not_found)",
        "Look it up with `.venv/bin/plumb project list`.",
    ]
    assert error.returncode == 1


def test_room_list_of_an_empty_server_is_just_the_header(db):
    assert listed("room", "list", queries=1) == [ROOM_HEADER]


# --- message list -----------------------------------------------------------------------


@pytest.fixture
def messages(alice, bob) -> list[Message]:
    """In room ``ops``: alice's plain message, bob's hidden one, and alice's tricky one."""
    services.room_create(alice, slug="ops")
    services.room_join(bob, "ops")
    services.message_send(alice, "ops", body="deploying now\nsecond line")
    hidden = services.message_send(bob, "ops", body="the host is db-7").message
    services.message_hide(hidden, actor="test", reason="leaked a hostname")
    services.message_send(
        alice, "ops", body="\n  \n\t\u202egnp.exe\u2066 \x1b[2J" + "x" * 200 + "\nmore"
    )
    return list(Message.objects.filter(room__slug="ops").order_by("seq"))


def test_message_list_shows_ids_authors_and_a_safe_first_line_newest_first(messages):
    plain, hidden, tricky = messages

    listing = listed("message", "list", "ops", queries=2)

    assert listing[0] == MESSAGE_HEADER
    assert [row[:3] + row[4:5] for row in listing[1:]] == [
        [str(tricky.seq), tricky.public_id, "alice", "shown"],
        [str(hidden.seq), hidden.public_id, "bob", "hidden"],
        [str(plain.seq), plain.public_id, "alice", "shown"],
    ]
    assert all(TIME.match(row[3]) for row in listing[1:])
    first_lines = [row[5] for row in listing[1:]]
    assert first_lines[1:] == ["the host is db-7", "deploying now"]
    # Control and bidi characters written out, whitespace flattened, cut at 80 characters.
    assert first_lines[0] == "<U+202E>gnp.exe<U+2066> <U+001B>[2J" + "x" * 65 + "…"
    assert all(line.count("  ") == 0 for line in first_lines)


def test_an_id_from_message_list_is_what_message_hide_takes(messages):
    listing = listed("message", "list", "ops", "--limit", "1", queries=2)
    assert len(listing) == 2
    message_id = listing[1][1]

    plumb("message", "hide", message_id, "--reason", "spoiler")

    assert Message.objects.get(public_id=message_id).hidden
    assert listed("message", "list", "ops", "--limit", "1", queries=2)[1][4] == "hidden"


def test_message_list_of_an_unknown_room_is_refused_naming_where_to_look(db):
    error = plumb_fails("message", "list", "nowhere")
    assert str(error).splitlines() == [
        "No room is named 'nowhere'. (room_not_found)",
        "Look it up with `.venv/bin/plumb room list`.",
    ]
    assert error.returncode == 1


@pytest.mark.parametrize("group", ["room", "message", "note"])
def test_a_limit_below_one_is_a_usage_error(db, group):
    args = ("message", "list", "ops") if group == "message" else (group, "list")
    error = plumb_fails(*args, "--limit", "0")
    assert "argument --limit: expected at least 1, got 0" in str(error)


# --- note list --------------------------------------------------------------------------


@pytest.fixture
def notes(alice, bob, far) -> dict[str, Note]:
    """alice → bob (delivered), alice → next (waiting), fay (project far) → alice (waiting)."""
    far_project = far.workspace.project
    far_project.accept_all_projects = True
    far_project.save()
    alice.workspace.project.accept_all_projects = True
    alice.workspace.project.save()
    left = {
        "to_bob": mailbox_services.note_leave(alice, body="secret plan", to="bob").note,
        "to_next": mailbox_services.note_leave(alice, body="whoever comes next").note,
        "from_far": mailbox_services.note_leave(far, body="hello from afar", to="alice").note,
    }
    assert client_for(bob).get("/api/v1/notes/").json()["notes"][0]["body"] == "secret plan"
    return {key: Note.objects.get(pk=note.pk) for key, note in left.items()}


def test_note_list_shows_who_wrote_to_whom_and_the_delivery_state_never_the_body(notes, alice):
    project = alice.workspace.project.slug

    out, _ = plumb("note", "list")
    listing = listed("note", "list", queries=1)

    assert listing[0] == NOTE_HEADER
    from_far, to_next, to_bob = notes["from_far"], notes["to_next"], notes["to_bob"]
    assert [row[1:7] for row in listing[1:]] == [
        [from_far.public_id, from_far.conversation.public_id, "far", "fay", "alice", "waiting"],
        [to_next.public_id, to_next.conversation.public_id, project, "alice", "next", "waiting"],
        [to_bob.public_id, to_bob.conversation.public_id, project, "alice", "bob", "delivered"],
    ]
    assert [row[7] for row in listing[1:]][:2] == ["-", "-"]
    assert TIME.match(listing[3][7])
    assert all(TIME.match(row[0]) for row in listing[1:])
    for body in ("secret plan", "whoever comes next", "hello from afar"):
        assert body not in out


@pytest.mark.parametrize(
    ("state", "expected"), [("waiting", ["from_far", "to_next"]), ("delivered", ["to_bob"])]
)
def test_note_list_narrows_to_a_state(notes, state, expected):
    listing = listed("note", "list", "--state", state, queries=1)
    assert [row[1] for row in listing[1:]] == [notes[key].public_id for key in expected]
    assert {row[6] for row in listing[1:]} == {state}


def test_note_list_shows_a_bounced_note_as_bounced_never_delivered(notes, alice):
    # A week and a day on: the two notes still waiting bounce (their plumb notices wait).
    assert mailbox_services.notes_bounce(now=notes["to_next"].created_at + timedelta(days=8)) == 2

    listing = listed("note", "list", "--state", "bounced", queries=1)

    assert [row[1] for row in listing[1:]] == [
        notes["from_far"].public_id,
        notes["to_next"].public_id,
    ]
    assert {row[6] for row in listing[1:]} == {"bounced"}
    delivered = listed("note", "list", "--state", "delivered", queries=1)
    assert [row[1] for row in delivered[1:]] == [notes["to_bob"].public_id]


def test_note_list_of_a_project_has_the_notes_its_agents_sent_and_were_sent(notes, far):
    listing = listed("note", "list", "far", queries=2)
    assert [row[1] for row in listing[1:]] == [notes["from_far"].public_id]

    listing = listed("note", "list", "far", "--state", "delivered", queries=2)
    assert listing == [NOTE_HEADER]

    far_bound = WorkspaceFactory(project=far.workspace.project, slug="second")
    SessionFactory(workspace=far_bound, name="finn")
    note = mailbox_services.note_leave(notes["to_bob"].sender_session, body="hi", to="finn").note
    listing = listed("note", "list", "far", queries=2)
    assert [row[1] for row in listing[1:]] == [note.public_id, notes["from_far"].public_id]


def test_note_list_stops_at_the_limit(notes):
    listing = listed("note", "list", "--limit", "1", queries=1)
    assert [row[1] for row in listing[1:]] == [notes["from_far"].public_id]


def test_a_conversation_id_from_note_list_is_what_conversation_lock_takes(notes):
    conversation_id = listed("note", "list", "--state", "delivered", queries=1)[1][2]

    plumb("conversation", "lock", conversation_id, "--reason", "off topic")

    assert Conversation.objects.get(public_id=conversation_id).locked_at is not None


@pytest.mark.parametrize("state", ["pending", "WAITING", "undelivered"])
def test_an_unknown_note_state_is_a_usage_error(db, state):
    error = plumb_fails("note", "list", "--state", state)
    assert f"argument --state: invalid choice: '{state}'" in str(error)
