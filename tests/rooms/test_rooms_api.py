"""Rooms and members over HTTP (SPEC §4.1): create, list, get, join, leave, members.

Every refusal is checked for its status, its code and that nothing was stored
(rooms, members, events, messages and every room's head seq unchanged).
Sending, reading and reviewing are in test_message_*.py.
"""

from datetime import datetime

import pytest
from django.apps import apps
from django.db import connection, models
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from rooms import services
from rooms.models import Event, Member, Message, Room
from tests.conftest import assert_error, client_for
from tests.factories import OptInFactory, ProjectFactory, SessionFactory, WorkspaceFactory
from tests.rooms.messaging import flood_limit_lifted

pytestmark = pytest.mark.django_db

ROOMS = "/api/v1/rooms/"

ROOM_FIELDS = {
    "slug",
    "project",
    "title",
    "topic",
    "locked",
    "latest_seq",
    "created_at",
    "member",
    "read_seq",
    "unseen",
}
MEMBER_FIELDS = {"handle", "display_name", "display_name_visible", "joined_at", "muted", "read_seq"}


@pytest.fixture(autouse=True)
def _no_rate_limits(settings):
    # Some tests make more calls per second than the default session rate allows.
    settings.PLUMB_RATE_SESSION = None


@pytest.fixture
def other_project(db):
    return ProjectFactory(slug="other")


@pytest.fixture
def olga(other_project):
    """An agent of another project."""
    return SessionFactory(
        workspace=WorkspaceFactory(project=other_project, slug="elsewhere"), name="olga"
    )


# --- helpers ---------------------------------------------------------------------------


def create_room(session, slug="general", **fields):
    return client_for(session).post(ROOMS, {"slug": slug, **fields}, format="json")


def make_room(session, slug="general", **fields) -> dict:
    response = create_room(session, slug, **fields)
    assert response.status_code == 201, response.content
    return response.json()


def join(session, slug="general", **body):
    return client_for(session).post(f"{ROOMS}{slug}/join", body, format="json")


def leave(session, slug="general"):
    return client_for(session).post(f"{ROOMS}{slug}/leave", {}, format="json")


def members(session, slug="general"):
    return client_for(session).get(f"{ROOMS}{slug}/members/")


def room_list(session) -> dict:
    response = client_for(session).get(ROOMS)
    assert response.status_code == 200, response.content
    return response.json()


def listed(session) -> dict[str, dict]:
    return {room["slug"]: room for room in room_list(session)["rooms"]}


def send(session, slug="general", **body):
    return client_for(session).post(f"{ROOMS}{slug}/messages/", body, format="json")


def stored_state() -> tuple:
    """Everything a refused call must leave as it was."""
    return (
        list(Room.objects.order_by("slug").values_list("slug", "head_seq")),
        list(Member.objects.order_by("pk").values_list("room__slug", "name__handle", "left_at")),
        Event.objects.count(),
        Message.objects.count(),
    )


def is_iso_utc(value: str) -> bool:
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed.utcoffset() is not None and parsed.utcoffset().total_seconds() == 0


def head_seq(slug="general") -> int:
    return Room.objects.get(slug=slug).head_seq


# --- create ---------------------------------------------------------------------------


def test_creating_a_room_makes_the_creator_a_member_with_the_join_event_at_seq_1(alice, project):
    response = create_room(alice, "general", title="General", topic="Everything else")

    assert response.status_code == 201
    body = response.json()
    assert set(body) == {"room", "event", "latest_seq", "scrubbed", "notes"}
    assert body["notes"] == []
    assert body["scrubbed"] == []
    assert body["latest_seq"] == 1
    assert set(body["room"]) == ROOM_FIELDS
    assert body["room"]["slug"] == "general"
    assert body["room"]["project"] == project.slug
    assert body["room"]["title"] == "General"
    assert body["room"]["topic"] == "Everything else"
    assert body["room"]["locked"] is False
    assert body["room"]["latest_seq"] == 1
    assert body["room"]["member"] is True
    assert body["room"]["read_seq"] == 1
    assert body["room"]["unseen"] == 0
    assert is_iso_utc(body["room"]["created_at"])
    assert body["event"]["seq"] == 1
    assert body["event"]["kind"] == "join"
    assert body["event"]["actor"]["handle"] == "alice"
    assert body["event"]["message"] is None
    room = Room.objects.get(slug="general")
    assert room.project == project
    assert room.head_seq == 1
    assert list(room.events.values_list("seq", "kind", "actor__handle")) == [(1, "join", "alice")]
    member = Member.objects.get(room=room)
    assert member.name.handle == "alice"
    assert member.read_seq == 1
    assert member.left_at is None


def test_a_room_slug_taken_in_any_project_is_refused_with_room_exists(alice, olga):
    make_room(olga, "general")
    before = stored_state()

    response = create_room(alice, "general", title="Mine")

    assert_error(response, 409, "room_exists")
    assert stored_state() == before
    assert Room.objects.get(slug="general").title == ""


@pytest.mark.parametrize(
    "slug",
    [
        "General",
        "-general",
        "gen eral",
        "gen_eral",
        "",
        "a" * 65,
        "g\u00e9n\u00e9ral",
        "general\n",
        42,
        None,
    ],
    ids=[
        "upper",
        "leading-dash",
        "space",
        "underscore",
        "empty",
        "65",
        "accent",
        "trailing-newline",
        "int",
        "null",
    ],
)
def test_a_bad_slug_is_refused_with_validation_error(alice, slug):
    response = client_for(alice).post(ROOMS, {"slug": slug}, format="json")

    error = assert_error(response, 400, "validation_error")
    assert "slug" in error["details"]
    assert stored_state() == ([], [], 0, 0)


def test_a_room_without_a_slug_is_refused_with_validation_error(alice):
    response = client_for(alice).post(ROOMS, {"title": "No slug"}, format="json")

    error = assert_error(response, 400, "validation_error")
    assert "slug" in error["details"]
    assert not Room.objects.exists()


# --- list and get ---------------------------------------------------------------------


def test_the_list_shows_own_project_rooms_and_joined_rooms_but_not_other_projects_unjoined_rooms(
    alice, bob, olga, other_project
):
    make_room(alice, "general")
    make_room(bob, "backend")  # alice's project, alice not a member
    other_project.accept_all_projects = True
    other_project.save()
    make_room(olga, "their-open")
    make_room(olga, "their-private")
    assert join(alice, "their-open").status_code == 201

    body = room_list(alice)

    assert set(body) == {"rooms", "has_more", "notes"}
    assert body["has_more"] is False
    assert [room["slug"] for room in body["rooms"]] == ["backend", "general", "their-open"]
    rooms = {room["slug"]: room for room in body["rooms"]}
    assert all(set(room) == ROOM_FIELDS for room in body["rooms"])
    assert rooms["general"]["member"] is True
    assert rooms["general"]["read_seq"] == 1
    assert rooms["general"]["unseen"] == 0
    assert rooms["their-open"]["member"] is True
    assert rooms["their-open"]["project"] == "other"
    assert rooms["their-open"]["latest_seq"] == 2
    assert rooms["their-open"]["read_seq"] == 2
    assert rooms["backend"]["member"] is False
    assert rooms["backend"]["read_seq"] is None
    assert rooms["backend"]["unseen"] is None
    assert rooms["backend"]["latest_seq"] == 1


def test_the_list_pages_by_slug_with_a_cursor(alice, bob):
    for slug in ("a-1", "b-2", "c-3", "d-4", "e-5"):
        make_room(bob if slug == "c-3" else alice, slug)

    pages, after = [], None
    for _ in range(5):
        params = {"limit": 2, **({"after_slug": after} if after else {})}
        body = client_for(alice).get(ROOMS, params).json()
        pages.append([room["slug"] for room in body["rooms"]])
        if not body["has_more"]:
            break
        after = body["rooms"][-1]["slug"]

    assert pages == [["a-1", "b-2"], ["c-3", "d-4"], ["e-5"]]


def test_a_room_created_between_pages_does_not_shift_the_next_page(alice):
    for slug in ("b-2", "d-4", "f-6"):
        make_room(alice, slug)
    first = client_for(alice).get(ROOMS, {"limit": 2}).json()
    make_room(alice, "a-1")  # sorts before the cursor: never seen, never repeats

    second = client_for(alice).get(ROOMS, {"limit": 2, "after_slug": "d-4"}).json()

    assert [room["slug"] for room in first["rooms"]] == ["b-2", "d-4"]
    assert [room["slug"] for room in second["rooms"]] == ["f-6"]
    assert second["has_more"] is False


@pytest.mark.parametrize("params", [{"limit": 0}, {"limit": 201}, {"limit": "x"}])
def test_a_bad_page_size_is_a_validation_error(alice, params):
    assert_error(client_for(alice).get(ROOMS, params), 400, "validation_error")


def test_leaving_a_room_of_another_project_answers_200_and_drops_it_from_the_list(alice, olga):
    other = olga.workspace.project
    OptInFactory(project=other, source=alice.workspace.project)
    make_room(olga, "theirs")
    join(alice, "theirs")
    assert "theirs" in listed(alice)

    response = leave(alice, "theirs")

    # The leave is stored either way; the answer must say so, not "not_a_member".
    assert Event.objects.filter(room__slug="theirs", kind="leave").count() == 1
    assert response.status_code == 200, response.content
    assert response.json()["event"]["kind"] == "leave"
    assert response.json()["room"]["member"] is False
    assert "theirs" not in listed(alice)


def test_the_list_counts_unseen_messages_from_others_above_the_read_position(alice, bob, carol):
    make_room(alice)
    join(bob)
    send(bob, body="one")
    send(bob, body="two")
    send(alice, body="mine")
    join(carol)  # a join is an event, not a message

    room = listed(alice)["general"]

    assert room["latest_seq"] == 6
    assert room["read_seq"] == 1
    assert room["unseen"] == 2
    assert listed(bob)["general"]["unseen"] == 1


def test_getting_one_room_returns_it_with_the_callers_position(alice, bob):
    make_room(alice, "general", title="General", topic="All of it")
    join(bob)
    send(bob, body="hello")

    response = client_for(alice).get(f"{ROOMS}general/")

    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"room", "notes"}
    assert set(body["room"]) == ROOM_FIELDS
    assert body["room"]["slug"] == "general"
    assert body["room"]["title"] == "General"
    assert body["room"]["topic"] == "All of it"
    assert body["room"]["latest_seq"] == 3
    assert body["room"]["read_seq"] == 1
    assert body["room"]["unseen"] == 1
    assert body["room"]["member"] is True


def test_a_locked_room_shows_locked(alice):
    make_room(alice)
    Room.objects.filter(slug="general").update(locked_at=timezone.now())

    response = client_for(alice).get(f"{ROOMS}general/")

    assert response.json()["room"]["locked"] is True


# --- room_not_found and not_a_member -------------------------------------------------------


ROOM_CALLS = [
    ("get", "{slug}/", None),
    ("post", "{slug}/join", {}),
    ("post", "{slug}/leave", {}),
    ("get", "{slug}/members/", None),
    ("get", "{slug}/messages/", None),
    ("post", "{slug}/messages/", {"body": "hello", "idempotency_key": "k"}),
    ("post", "{slug}/read", {"seq": 0}),
    ("post", "{slug}/messages/msg_unknown/reviews/", {"verdict": "approve"}),
]
ROOM_CALL_IDS = ["get", "join", "leave", "members", "read", "send", "mark-read", "review"]


def call(session, method: str, path: str, body):
    client = client_for(session)
    if method == "get":
        return client.get(ROOMS + path)
    return client.post(ROOMS + path, body, format="json")


@pytest.mark.parametrize(("method", "path", "body"), ROOM_CALLS, ids=ROOM_CALL_IDS)
def test_every_room_call_answers_room_not_found_for_an_unknown_slug(alice, method, path, body):
    make_room(alice, "general")
    before = stored_state()

    response = call(alice, method, path.format(slug="nowhere"), body)

    assert_error(response, 404, "room_not_found")
    assert stored_state() == before


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [c for c in ROOM_CALLS if "join" not in c[1]],
    ids=[i for i in ROOM_CALL_IDS if i != "join"],
)
def test_a_room_of_another_project_answers_not_a_member_not_404(alice, olga, method, path, body):
    make_room(olga, "theirs")
    message_id = send(olga, "theirs", body="ours").json()["message"]["id"]
    path = path.replace("msg_unknown", message_id)
    before = stored_state()

    response = call(alice, method, path.format(slug="theirs"), body)

    assert_error(response, 403, "not_a_member")
    assert stored_state() == before


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [c for c in ROOM_CALLS if c[1] not in ("{slug}/", "{slug}/join", "{slug}/members/")],
    ids=["leave", "read", "send", "mark-read", "review"],
)
def test_a_non_member_of_a_room_of_its_own_project_gets_not_a_member(
    alice, bob, method, path, body
):
    make_room(alice, "general")
    message_id = send(alice, body="hello").json()["message"]["id"]
    path = path.replace("msg_unknown", message_id)
    before = stored_state()

    response = call(bob, method, path.format(slug="general"), body)

    assert_error(response, 403, "not_a_member")
    assert stored_state() == before


def test_a_room_of_its_own_project_is_visible_to_a_non_member(alice, bob):
    make_room(alice, "general")

    response = client_for(bob).get(f"{ROOMS}general/")

    assert response.status_code == 200
    room = response.json()["room"]
    assert room["member"] is False
    assert room["read_seq"] is None
    assert room["unseen"] is None


# --- join ---------------------------------------------------------------------------------


def test_joining_with_a_display_name_appends_a_join_event(alice, bob):
    make_room(alice)

    response = join(bob, display_name="Bob the Builder")

    assert response.status_code == 201
    body = response.json()
    assert body["notes"] == []
    assert body["latest_seq"] == 2
    assert body["event"]["seq"] == 2
    assert body["event"]["kind"] == "join"
    assert body["event"]["actor"] == {
        "handle": "bob",
        "display_name": "Bob the Builder",
        "display_name_visible": "Bob the Builder",
        "kind": "agent",
    }
    assert body["room"]["member"] is True
    assert body["room"]["read_seq"] == 2
    member = Member.objects.get(room__slug="general", name__handle="bob")
    assert member.display_name == "Bob the Builder"
    assert member.read_seq == 2
    assert head_seq() == 2
    assert list(Event.objects.values_list("seq", "kind", "actor__handle")) == [
        (1, "join", "alice"),
        (2, "join", "bob"),
    ]


def test_joining_again_is_a_no_op_that_answers_200(alice, bob):
    make_room(alice)
    join(bob, display_name="Bob")
    before = stored_state()

    again = join(bob, display_name="Somebody else")
    creator = join(alice)

    for response in (again, creator):
        assert response.status_code == 200
        assert response.json()["event"] is None
        assert response.json()["latest_seq"] == 2
        assert response.json()["room"]["member"] is True
    assert stored_state() == before
    assert Member.objects.get(name__handle="bob").display_name == "Bob"


@pytest.mark.parametrize(
    "display_name", ["x" * 65, "nul\x00here", 42], ids=["65-chars", "nul", "not-a-string"]
)
def test_a_bad_display_name_is_refused_with_validation_error(alice, bob, display_name):
    make_room(alice)
    before = stored_state()

    response = join(bob, display_name=display_name)

    error = assert_error(response, 400, "validation_error")
    assert "display_name" in error["details"]
    assert stored_state() == before


def test_joining_a_room_of_another_project_without_an_opt_in_is_refused(alice, olga):
    make_room(olga, "theirs")
    OptInFactory(project=alice.workspace.project, source=olga.workspace.project)  # wrong way
    before = stored_state()

    response = join(alice, "theirs")

    error = assert_error(response, 403, "cross_project_refused")
    assert error["details"] == {
        "room_project": "other",
        "your_project": alice.workspace.project.slug,
    }
    assert stored_state() == before
    assert not Member.objects.filter(name__handle="alice").exists()


def test_joining_a_room_of_another_project_is_accepted_once_that_project_opts_in(alice, olga):
    make_room(olga, "theirs")
    OptInFactory(project=olga.workspace.project, source=alice.workspace.project)

    response = join(alice, "theirs")

    assert response.status_code == 201
    assert response.json()["event"]["kind"] == "join"
    assert response.json()["event"]["seq"] == 2
    assert Member.objects.filter(room__slug="theirs", name__handle="alice").exists()
    assert send(alice, "theirs", body="hello from main").status_code == 201


def test_joining_a_room_of_a_project_that_accepts_all_projects_is_accepted(alice, olga):
    other = olga.workspace.project
    other.accept_all_projects = True
    other.save()
    make_room(olga, "theirs")

    response = join(alice, "theirs")

    assert response.status_code == 201
    assert response.json()["room"]["member"] is True


# --- leave and rejoin -----------------------------------------------------------------------


def test_leaving_appends_a_leave_event_and_ends_the_membership(alice, bob):
    make_room(alice)
    join(bob)

    response = leave(bob)

    assert response.status_code == 200
    body = response.json()
    assert body["notes"] == []
    assert body["event"]["seq"] == 3
    assert body["event"]["kind"] == "leave"
    assert body["event"]["actor"]["handle"] == "bob"
    assert body["latest_seq"] == 3
    assert body["room"]["member"] is False
    assert head_seq() == 3
    assert Member.objects.get(name__handle="bob").left_at is not None
    assert_error(send(bob, body="still here?"), 403, "not_a_member")


def test_leaving_twice_is_refused_with_not_a_member(alice, bob):
    make_room(alice)
    join(bob)
    leave(bob)
    before = stored_state()

    response = leave(bob)

    assert_error(response, 403, "not_a_member")
    assert stored_state() == before


def test_rejoining_after_leaving_appends_a_new_join_event(alice, bob):
    make_room(alice)
    join(bob, display_name="Bob")
    leave(bob)

    response = join(bob)

    assert response.status_code == 201
    assert response.json()["event"]["seq"] == 4
    assert response.json()["event"]["kind"] == "join"
    # The old display name is kept when the rejoin does not name one.
    assert response.json()["event"]["actor"]["display_name"] == "Bob"
    member = Member.objects.get(name__handle="bob")
    assert member.left_at is None
    assert member.read_seq == 4
    assert list(Event.objects.values_list("seq", "kind")) == [
        (1, "join"),
        (2, "join"),
        (3, "leave"),
        (4, "join"),
    ]


# --- members ------------------------------------------------------------------------------


def test_the_member_list_shows_each_current_member(alice, bob):
    make_room(alice, display_name="Alice")
    join(bob, display_name="Bob")

    response = members(alice)

    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"members", "notes"}
    assert [m["handle"] for m in body["members"]] == ["alice", "bob"]
    assert all(set(m) == MEMBER_FIELDS for m in body["members"])
    first, second = body["members"]
    assert first["display_name"] == "Alice"
    assert first["display_name_visible"] == "Alice"
    assert first["muted"] is False
    assert first["read_seq"] == 1
    assert second["read_seq"] == 2
    assert is_iso_utc(first["joined_at"])
    assert first["joined_at"] <= second["joined_at"]


def test_the_member_list_writes_invisible_and_bidi_characters_visibly(alice, bob):
    make_room(alice)
    join(bob, display_name="Bo\u200bb \u202eevil")

    response = members(alice)

    listed_bob = next(m for m in response.json()["members"] if m["handle"] == "bob")
    assert listed_bob["display_name"] == "Bo\u200bb \u202eevil"
    assert listed_bob["display_name_visible"] == "Bo<U+200B>b <U+202E>evil"


def test_the_member_list_shows_who_is_muted(alice, bob):
    make_room(alice)
    join(bob)
    Member.objects.filter(name__handle="bob").update(muted_at=timezone.now())

    response = members(alice)

    assert {m["handle"]: m["muted"] for m in response.json()["members"]} == {
        "alice": False,
        "bob": True,
    }


def test_members_who_left_are_not_listed(alice, bob, carol):
    make_room(alice)
    join(bob)
    join(carol)
    leave(bob)

    response = members(alice)

    assert [m["handle"] for m in response.json()["members"]] == ["alice", "carol"]


def test_a_muted_member_stays_muted_after_leaving_and_rejoining(alice, bob):
    make_room(alice)
    join(bob)
    Member.objects.filter(name__handle="bob").update(muted_at=timezone.now())
    leave(bob)

    assert join(bob).status_code == 201

    listed_bob = next(m for m in members(alice).json()["members"] if m["handle"] == "bob")
    assert listed_bob["muted"] is True
    assert_error(send(bob, body="I am back"), 403, "member_muted")


def test_the_member_list_shows_read_positions_as_they_move(alice, bob):
    make_room(alice)
    join(bob)
    send(bob, body="hello")
    client_for(alice).get(f"{ROOMS}general/messages/")

    response = members(bob)

    assert {m["handle"]: m["read_seq"] for m in response.json()["members"]} == {
        "alice": 3,
        "bob": 3,
    }


# --- query counts ---------------------------------------------------------------------------


def seed_room(slug: str, *, members: int, events: int, workspace) -> list:
    """A room with ``members`` members and ``events`` events, made through the services."""
    sessions = [SessionFactory(workspace=workspace, name=f"{slug}-m{i}") for i in range(members)]
    services.room_create(sessions[0], slug=slug)
    for session in sessions[1:]:
        services.room_join(session, slug)
    with flood_limit_lifted(workspace.project_id):
        for i in range(events - members):
            services.message_send(sessions[i % members], slug, body=f"message {i} for @{slug}-m0")
    assert head_seq(slug) == events
    return sessions


# Authentication, the room list with the caller's position, note delivery.
LIST_ROOMS_QUERIES = 3


def count_queries(session) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = client_for(session).get(ROOMS)
    assert response.status_code == 200
    return len(queries)


def test_listing_rooms_runs_the_same_queries_for_small_and_big_rooms(
    workspace, django_assert_max_num_queries, settings
):
    settings.PLUMB_SEEN_WRITE_INTERVAL = 3600  # no last_seen_at write, however long seeding takes
    small = seed_room("small", members=3, events=5, workspace=workspace)
    with django_assert_max_num_queries(LIST_ROOMS_QUERIES):
        response = client_for(small[1]).get(ROOMS)
    assert response.status_code == 200
    small_count = count_queries(small[1])
    big = seed_room("big", members=30, events=200, workspace=workspace)
    for i in range(10):
        services.room_create(big[2], slug=f"extra-{i}")

    with django_assert_max_num_queries(LIST_ROOMS_QUERIES):
        response = client_for(big[1]).get(ROOMS)

    assert len(response.json()["rooms"]) == 12
    assert response.json()["rooms"][0]["slug"] == "big"
    assert response.json()["rooms"][0]["unseen"] > 0
    assert count_queries(big[1]) == small_count


# --- scrubbing (SPEC §3.5): titles, topics and display names are stored scrubbed -----------

GITHUB_TOKEN = "ghp" + "_kfhfgtKAQWYm85EZgslmBp65HpUbz04IfkvX"
PASSPHRASE = "correct horse battery staple"


def assert_nowhere_in_the_database(*secrets: str) -> None:
    """No text column of any table holds any of ``secrets``."""
    text_fields = (models.CharField, models.TextField, models.JSONField)
    for model in apps.get_models():
        names = [f.name for f in model._meta.concrete_fields if isinstance(f, text_fields)]
        if not names:
            continue
        for row in model.objects.values_list(*names):
            stored = repr(row)
            for secret in secrets:
                assert secret not in stored, (model.__name__, row)


def test_a_secret_in_a_room_title_topic_or_display_name_never_reaches_the_database(alice):
    response = create_room(
        alice,
        title=f"Deploys (bot uses {GITHUB_TOKEN})",
        topic=f'Staging creds: password: "{PASSPHRASE}"',
        display_name=f"ci {GITHUB_TOKEN}",
    )

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["scrubbed"] == [
        {"kind": "github_token", "count": 2},
        {"kind": "password_assignment", "count": 1},
    ]
    room = Room.objects.get(slug="general")
    assert room.title == "Deploys (bot uses [REDACTED:github_token])"
    assert room.topic == 'Staging creds: password: "[REDACTED:password_assignment]"'
    assert Member.objects.get(room=room).display_name == "ci [REDACTED:github_token]"
    assert Event.objects.get(room=room).actor_display_name == "ci [REDACTED:github_token]"
    assert body["room"]["title"] == room.title
    assert body["room"]["topic"] == room.topic
    assert body["event"]["actor"]["display_name"] == "ci [REDACTED:github_token]"
    assert GITHUB_TOKEN not in response.content.decode()
    assert PASSPHRASE not in response.content.decode()
    assert_nowhere_in_the_database(GITHUB_TOKEN, PASSPHRASE)


def test_a_room_without_secrets_reports_nothing_scrubbed(alice, bob):
    created = make_room(alice, title="General", topic="password reset flow", display_name="Al")
    joined = join(bob, display_name="Bob").json()

    assert created["scrubbed"] == []
    assert joined["scrubbed"] == []
    assert Room.objects.get().topic == "password reset flow"


def test_a_secret_in_a_display_name_given_on_join_never_reaches_the_database(alice, bob):
    make_room(alice)

    response = join(bob, display_name=f"Bob {GITHUB_TOKEN}")

    assert response.status_code == 201
    assert response.json()["scrubbed"] == [{"kind": "github_token", "count": 1}]
    assert response.json()["event"]["actor"]["display_name"] == "Bob [REDACTED:github_token]"
    assert Member.objects.get(name__handle="bob").display_name == "Bob [REDACTED:github_token]"
    assert GITHUB_TOKEN not in response.content.decode()
    shown = members(alice).json()["members"]
    assert [m["display_name"] for m in shown] == ["", "Bob [REDACTED:github_token]"]
    assert_nowhere_in_the_database(GITHUB_TOKEN)


def test_a_display_name_that_redaction_grows_past_its_limit_is_refused(alice, bob):
    make_room(alice)
    before = stored_state()
    # 64 characters as sent, 84 once the 10-character password is a 30-character marker.
    display_name = "password=Zq8!rT3#vW " + "y" * 44

    response = join(bob, display_name=display_name)

    error = assert_error(response, 400, "validation_error")
    assert "display_name" in error["details"]
    assert stored_state() == before
    assert_nowhere_in_the_database("Zq8!rT3#vW")
