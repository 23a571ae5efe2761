"""Search, black-box through both doors (SPEC §9): ``GET /api/v1/search/`` and the MCP
tool ``search`` find exactly what they should, only what the caller may read, and
answer a malformed query with ``400 invalid_query``."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from common import limits
from mailbox import services as mailbox_services
from rooms import services
from rooms.api.serializers import SearchResultSerializer
from rooms.models import Message
from tests.factories import SessionFactory
from tests.searching import RESULT_KEYS, search, search_rest

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("_no_rate_limits")]

DOORS = ["rest", "mcp"]


def ids(body: dict) -> list[str]:
    return [result["id"] for result in body["results"]]


def send(session, room: str, body: str) -> str:
    return services.message_send(session, room, body=body).message.public_id


@pytest.fixture
def lab(alice, bob):
    services.room_create(alice, slug="lab")
    services.room_join(bob, "lab")
    return {
        "phrase": send(alice, "lab", "The cache key must include the tenant id."),
        "apart": send(bob, "lab", "Rotate the key, then empty the cache."),
        "prefix": send(alice, "lab", "Deployment of build 12 went fine."),
        "accent": send(bob, "lab", "Décision prise au café: on garde la façade."),
        "flaky": send(alice, "lab", "The cache key test is flaky again."),
    }


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize(
    ("q", "expected"),
    [
        ('"cache key"', {"phrase", "flaky"}),
        ("cache key", {"phrase", "apart", "flaky"}),
        ('"cache key" -flaky', {"phrase"}),
        ("deploy*", {"prefix"}),
        ("DEPLOYMENT", {"prefix"}),
        ("decision cafe facade", {"accent"}),
        ("Décision", {"accent"}),
        ('cache -"cache key"', {"apart"}),
        ("nothing-like-this", set()),
    ],
)
def test_phrases_prefixes_exclusions_and_accents_find_exactly_what_they_should(
    door, lab, bob, q, expected
):
    status, body = search(door, bob, q=q)

    assert status == 200, body
    assert set(ids(body)) == {lab[name] for name in expected}
    assert body["has_more"] is False
    assert body["cursor"] is None


@pytest.mark.parametrize("door", DOORS)
def test_a_result_carries_where_it_is_who_wrote_it_and_a_snippet(door, lab, bob):
    status, body = search(door, bob, q='"cache key" -flaky')

    assert status == 200
    (result,) = body["results"]
    assert set(result) == RESULT_KEYS["message"]
    message = Message.objects.get(public_id=result["id"])
    assert result["kind"] == "message"
    assert result["room"] == "lab"
    assert result["seq"] == message.seq
    assert result["from"] == {
        "name": "alice",
        "workspace": "main",
        "project": message.author.workspace.project.slug,
        "kind": "agent",
    }
    assert result["snippet"] == "The **cache key** must include the tenant id."
    assert body["notes"] == []


def test_the_schema_declares_every_field_of_both_kinds_of_result():
    declared = list(SearchResultSerializer().fields)
    assert set(declared) == RESULT_KEYS["message"] | RESULT_KEYS["note"]


@pytest.mark.parametrize("door", DOORS)
def test_a_member_of_one_room_never_sees_another_rooms_messages(door, lab, alice, carol):
    services.room_create(carol, slug="other")
    theirs = send(carol, "other", "cache key of the other room")

    _, for_carol = search(door, carol, q="cache")
    _, for_alice = search(door, alice, q="cache")

    assert ids(for_carol) == [theirs]
    assert theirs not in ids(for_alice)
    assert set(ids(for_alice)) == {lab["phrase"], lab["apart"], lab["flaky"]}


@pytest.mark.parametrize("door", DOORS)
def test_a_room_left_is_searched_no_more_until_joined_again(door, lab, bob):
    services.room_leave(bob, "lab")
    _, gone = search(door, bob, q="cache")
    services.room_join(bob, "lab")
    _, back = search(door, bob, q="cache")

    assert ids(gone) == []
    assert set(ids(back)) == {lab["phrase"], lab["apart"], lab["flaky"]}


@pytest.mark.parametrize("door", DOORS)
def test_a_hidden_message_is_gone_at_once_and_back_when_unhidden(door, lab, bob):
    message = Message.objects.get(public_id=lab["phrase"])

    services.message_hide(message, actor="admin:mod", reason="off topic")
    _, hidden = search(door, bob, q="tenant")
    services.message_unhide(message, actor="admin:mod")
    _, unhidden = search(door, bob, q="tenant")

    assert ids(hidden) == []
    assert ids(unhidden) == [lab["phrase"]]


@pytest.mark.parametrize("door", DOORS)
def test_a_message_is_found_the_moment_its_send_returns(door, lab, alice, bob):
    sent = send(alice, "lab", "fresh words: zeppelin")
    _, body = search(door, bob, q="zeppelin")
    assert ids(body) == [sent]


@pytest.mark.parametrize("door", DOORS)
def test_a_note_is_found_only_by_its_threads_participants(door, alice, bob, carol):
    left = mailbox_services.note_leave(alice, body="The staging password rotates Friday", to="bob")
    note_id = left.note.public_id

    found = {who.name.handle: search(door, who, q="staging rotates") for who in (alice, bob, carol)}

    assert ids(found["alice"][1]) == [note_id]
    assert ids(found["bob"][1]) == [note_id]
    assert ids(found["carol"][1]) == []
    (result,) = found["bob"][1]["results"]
    assert set(result) == RESULT_KEYS["note"]
    assert result["conversation_id"] == left.note.conversation.public_id
    assert result["from"]["name"] == "alice"
    assert result["snippet"] == "The **staging** password **rotates** Friday"


@pytest.mark.parametrize("door", DOORS)
def test_a_note_to_next_is_found_by_whoever_it_was_delivered_to(door, workspace, alice):
    mailbox_services.note_leave(alice, body="handover: the runbook is in ops/")
    newcomer = SessionFactory(workspace=workspace, name="newcomer")
    assert search(door, newcomer, q="runbook")[1]["results"] == []

    mailbox_services.notes_claim(newcomer)

    assert len(search(door, newcomer, q="runbook")[1]["results"]) == 1
    assert len(search(door, alice, q="runbook")[1]["results"]) == 1


# --- filters ---------------------------------------------------------------------------------


@pytest.mark.parametrize("door", DOORS)
def test_room_and_author_filters(door, lab, alice, bob):
    services.room_create(alice, slug="ops")
    in_ops = send(alice, "ops", "cache warmed in ops")
    mailbox_services.note_leave(alice, body="cache note", to="bob")

    _, in_lab = search(door, alice, q="cache", room="lab")
    _, by_bob = search(door, alice, q="cache", author="bob")
    _, by_alice_in_ops = search(door, alice, q="cache", room="ops", author="alice")

    assert set(ids(in_lab)) == {lab["phrase"], lab["apart"], lab["flaky"]}
    assert ids(by_bob) == [lab["apart"]]
    assert ids(by_alice_in_ops) == [in_ops]


@pytest.mark.parametrize("door", DOORS)
def test_time_filters_keep_what_was_written_strictly_between(door, lab, bob):
    moment = timezone.now() - timedelta(hours=1)
    Message.objects.filter(public_id=lab["apart"]).update(created_at=moment)
    early = (moment - timedelta(minutes=1)).isoformat()
    late = (moment + timedelta(minutes=1)).isoformat()

    _, before = search(door, bob, q="cache", before=late)
    _, after = search(door, bob, q="cache", after=late)
    _, between = search(door, bob, q="cache", after=early, before=late)

    assert ids(before) == [lab["apart"]]
    assert set(ids(after)) == {lab["phrase"], lab["flaky"]}
    assert ids(between) == [lab["apart"]]


@pytest.mark.parametrize("door", DOORS)
def test_a_room_search_says_why_it_found_nothing(door, lab, carol):
    status, not_member = search(door, carol, q="cache", room="lab")
    assert (status, not_member["error"]["code"]) == (403, "not_a_member")
    status, unknown = search(door, carol, q="cache", room="no-such-room")
    assert (status, unknown["error"]["code"]) == (404, "room_not_found")


# --- ranking and paging ------------------------------------------------------------------------


@pytest.mark.parametrize("door", DOORS)
def test_best_matches_come_first(door, alice, bob):
    services.room_create(alice, slug="ranked")
    services.room_join(bob, "ranked")
    for i in range(20):
        send(alice, "ranked", f"unrelated chatter number {i} about lunch plans")
    once = send(alice, "ranked", "a long message " + "with many other words " * 20 + "and rollback")
    often = send(alice, "ranked", "rollback rollback: we rollback")

    _, body = search(door, bob, q="rollback")

    assert ids(body) == [often, once]


@pytest.mark.parametrize("door", DOORS)
def test_pages_follow_each_other_without_repeats_or_gaps_while_others_write(door, alice, bob):
    services.room_create(alice, slug="paged")
    services.room_join(bob, "paged")
    sent = {send(alice, "paged", f"paging test message {i}") for i in range(7)}

    seen: list[str] = []
    status, page = search(door, bob, q="paging", limit=3)
    pages = 1
    while True:
        assert status == 200, page
        seen += ids(page)
        if not page["has_more"]:
            break
        # New matches written between pages stay off the pages already begun.
        send(alice, "paged", f"paging test written meanwhile {pages}")
        status, page = search(door, bob, q="paging", limit=3, cursor=page["cursor"])
        pages += 1

    assert pages == 3
    assert len(seen) == len(set(seen)) == 7
    assert set(seen) == sent


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("cursor", ["garbage", "W10", "WzEsMiwzXQ", "x" * 200])
def test_a_cursor_that_is_not_one_is_refused(door, lab, bob, cursor):
    status, body = search(door, bob, q="cache", cursor=cursor)
    assert status == 400
    assert body["error"]["code"] == "validation_error"
    assert list(body["error"]["details"]) == ["cursor"]


@pytest.mark.parametrize("door", DOORS)
def test_a_cursor_belongs_to_its_own_query(door, lab, bob):
    _, first = search(door, bob, q="cache", limit=1)
    status, body = search(door, bob, q="key", limit=1, cursor=first["cursor"])
    assert status == 400
    assert list(body["error"]["details"]) == ["cursor"]


# --- malformed queries ----------------------------------------------------------------------


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize(
    ("q", "reason"),
    [
        ('"unbalanced', "unbalanced_quote"),
        ("-", "dangling_operator"),
        ("*", "dangling_operator"),
        ("-+-*" * 2500, "too_long"),
        ("NEAR(", None),
        ("col:", None),
        ("(", "no_positive_term"),
        ("", "empty"),
        ("-only", "no_positive_term"),
        ("ab*", "prefix_too_short"),
    ],
)
def test_malformed_queries_are_invalid_query_never_a_server_error(door, lab, bob, q, reason):
    status, body = search(door, bob, q=q)
    if reason is None:  # FTS syntax is words here
        assert status == 200
        return
    assert status == 400
    assert body["error"]["code"] == "invalid_query"
    assert body["error"]["details"] == {"reason": reason}


@pytest.mark.parametrize("door", DOORS)
def test_a_search_without_a_query_names_the_field(door, lab, bob):
    status, body = search(door, bob)
    assert status == 400
    assert body["error"]["code"] == "validation_error"
    assert list(body["error"]["details"]) == ["q"]


# --- cost ----------------------------------------------------------------------------------


def test_a_page_is_one_statement_however_much_matches(workspace, alice, bob, settings):
    settings.PLUMB_SEEN_WRITE_INTERVAL = 3600
    services.room_create(alice, slug="counted")
    services.room_join(bob, "counted")
    mailbox_services.note_leave(alice, body="counted note one", to="bob")
    mailbox_services.notes_claim(bob)

    def statements(results: int) -> int:
        with CaptureQueriesContext(connection) as captured:
            status, body = search_rest(bob, q="counted", limit=50)
        assert status == 200
        assert len(body["results"]) == results
        return len(captured)

    search_rest(bob, q="counted")  # the words queued so far join the index
    few = statements(1)
    for i in range(60):
        send(alice, "counted", f"counted message {i}")
        mailbox_services.note_leave(alice, body=f"counted note {i}", to="bob")
    mailbox_services.notes_claim(bob)
    search_rest(bob, q="counted")  # the words queued meanwhile join the index
    many = statements(50)

    # Authentication (which also says whether notes wait), on SQLite whether words wait
    # for the index (common/search/index.py), and the page.
    assert few == many == (3 if connection.vendor == "sqlite" else 2)


def test_only_the_newest_matches_on_the_server_are_ranked(monkeypatch, alice, bob, carol):
    """A search's cost is bounded: it ranks the newest SEARCH_RANKED_MAX matches of each
    kind on the server, readable or not; the filters narrow what those are."""
    monkeypatch.setattr(limits, "SEARCH_RANKED_MAX", 3)
    services.room_create(alice, slug="mine")
    services.room_create(carol, slug="theirs")
    old = [send(alice, "mine", f"bounded old {i}") for i in range(3)]
    cutoff = timezone.now()
    Message.objects.filter(public_id__in=old).update(created_at=cutoff - timedelta(hours=1))
    newer = [send(alice, "mine", f"bounded newer {i}") for i in range(2)]
    send(carol, "theirs", "bounded but not for alice")

    _, page = search_rest(alice, q="bounded", limit=10)
    _, back = search_rest(alice, q="bounded", before=cutoff.isoformat(), limit=10)

    assert set(ids(page)) == set(newer)
    assert set(ids(back)) == set(old)
