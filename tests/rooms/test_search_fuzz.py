"""Search under fuzzing: whatever the query, filters and cursor, both doors answer 200 or
a 4xx in the one error shape, never a server error (SPEC §2, §9)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mailbox import services as mailbox_services
from rooms import services
from tests.conftest import SNAKE_CASE
from tests.searching import search_mcp, search_rest

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("_no_rate_limits")]

PIECES = st.sampled_from(
    ['"', "-", "*", "(", ")", ":", "^", "+", "NEAR(", "NEAR/3", "NOT", "AND", "OR", "col:",
     "{document}:", "!", "&", "|", "<->", ":*", "'", "\\", "%", "%s", "?", "\x00",
     " ", "\t", "é", "日本", "cache", "key", "deploy*", "-flaky", '"cache key"', "\u200b",
     "\U0001f680", "ÄÖÜ", "ǅ", "ﬁ", ";", "--", "/*", "*/", "$1"]
)  # fmt: skip
QUERIES = st.lists(st.one_of(PIECES, st.text(max_size=6)), max_size=16).map("".join)
TIMES = ["2020-01-01T00:00:00Z", "yesterday", "9999-12-31T23:59:59-23:00", "0001-01-01", "1e9"]
FUZZ = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture
def world(alice, bob):
    services.room_create(alice, slug="lab")
    services.room_join(bob, "lab")
    for body in ["the cache key", "deploy on Friday", "café naïve", "NEAR col: AND"]:
        services.message_send(alice, "lab", body=body)
    mailbox_services.note_leave(alice, body="cache note for bob", to="bob")
    mailbox_services.notes_claim(bob)
    return bob


def check(status: int, body: dict) -> None:
    assert status in (200, 400, 403, 404), (status, body)
    if status == 200:
        assert isinstance(body["results"], list)
        return
    assert set(body) <= {"error", "schema_stale"}
    assert SNAKE_CASE.match(body["error"]["code"])
    if status == 400:
        assert body["error"]["code"] in ("invalid_query", "validation_error"), body


@FUZZ
@given(q=QUERIES)
@example(q="-+-*" * 2600)  # 10 KB of operators
@example(q="NEAR(cache key, 2)")
@example(q='document: "cache" OR key')
@example(q="\x00")
def test_any_query_through_rest_is_answered_without_a_server_error(world, q):
    check(*search_rest(world, q=q))


@FUZZ
@given(
    q=QUERIES,
    room=st.one_of(st.none(), st.sampled_from(["lab", "nope", "Bad Slug", "", "-x"])),
    author=st.one_of(st.none(), st.sampled_from(["alice", "ghost", " bob ", "A"])),
    after=st.one_of(st.none(), st.sampled_from(TIMES)),
    limit=st.one_of(st.none(), st.integers(-5, 500)),
    cursor=st.one_of(st.none(), st.text(max_size=40)),
)  # fmt: skip
def test_any_filters_through_rest_are_answered_without_a_server_error(
    world, q, room, author, after, limit, cursor
):
    params = {"q": q, "room": room, "author": author, "after": after, "limit": limit}
    params["cursor"] = cursor
    check(*search_rest(world, **{k: v for k, v in params.items() if v is not None}))


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    q=st.one_of(QUERIES, st.integers(), st.none(), st.lists(st.text(max_size=3), max_size=2)),
    limit=st.one_of(
        st.none(),
        st.integers(-5, 500),
        st.text(max_size=3),
        st.floats(allow_nan=False, allow_infinity=False),
    ),
)
@example(q="-+-*" * 2600, limit=None)
def test_any_arguments_of_the_tool_are_answered_without_a_server_error(world, q, limit):
    arguments = {"q": q} if limit is None else {"q": q, "limit": limit}
    check(*search_mcp(world, **arguments))
