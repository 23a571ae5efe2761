"""The at-sign gate never changes what resolve_mentions() returns.

resolve_mentions() answers at once for a body without an at sign;
resolve_mentions_full() always parses the markdown. These tests hold the two to
the same result on the mention corpus, on hand-picked edge cases (the
compatibility forms of "@", invisible and look-alike characters, at signs in
code, escapes and entities) and on random bodies, and pin the gate's at signs to
every code point that the parser reads as one.
"""

import random
import sys

import pytest

from rooms import mentions
from rooms.mentions import (
    Member,
    MentionResult,
    may_mention,
    resolve_mentions,
    resolve_mentions_full,
)
from tests.rooms.test_mentions import CORPUS, MEMBERS

TYPICAL = (
    "Round 3 is green on SQLite and PostgreSQL. I moved the flaky import test behind the slow "
    "marker, rebased on main and pushed `fix/import-cache`; reviewers, the interesting part is "
    "the cache key in loader.py. Next: docs."
)
SMALL_AT, FULLWIDTH_AT = "\ufe6b", "\uff20"
NOTHING = MentionResult(mentions=[], unresolved=[], warnings=[])


def test_the_gate_knows_every_character_the_parser_reads_as_an_at_sign() -> None:
    at_signs = {
        chr(code)
        for code in range(sys.maxunicode + 1)
        if not 0xD800 <= code <= 0xDFFF and mentions._is_at_sign(chr(code))
    }

    assert at_signs == set(mentions._AT_SIGNS)


@pytest.mark.parametrize("at_sign", ["@", SMALL_AT, FULLWIDTH_AT])
@pytest.mark.parametrize(
    "template", ["{}bob", "hi {}bob", "hi {}bob.", "\u200b{}bob", "**{}bob**", "[{}bob](x)"]
)
def test_every_at_sign_mentions_anywhere_in_the_body(template: str, at_sign: str) -> None:
    body = template.format(at_sign)

    assert may_mention(body)
    assert resolve_mentions(body, MEMBERS) == resolve_mentions_full(body, MEMBERS)
    assert [member.handle for member in resolve_mentions(body, MEMBERS).mentions] == ["bob"]


@pytest.mark.parametrize(("body", "members", "mentions", "unresolved", "warnings"), CORPUS)
@pytest.mark.parametrize("at_sign", ["@", SMALL_AT, FULLWIDTH_AT])
def test_the_corpus_resolves_the_same_with_and_without_the_gate(
    body: str,
    members: tuple[Member, ...],
    mentions: list[str],
    unresolved: list[str],
    warnings: list[dict[str, str]],
    at_sign: str,
) -> None:
    # Each case also written with the compatibility forms of the at sign.
    body = body.replace("@", at_sign)
    full = resolve_mentions_full(body, members)

    assert resolve_mentions(body, members) == full
    if at_sign == "@":
        assert [member.handle for member in full.mentions] == mentions


@pytest.mark.parametrize(("body", "members", "mentions", "unresolved", "warnings"), CORPUS)
def test_the_corpus_without_at_signs_mentions_no_one(
    body: str,
    members: tuple[Member, ...],
    mentions: list[str],
    unresolved: list[str],
    warnings: list[dict[str, str]],
) -> None:
    # Invisible and look-alike characters stay; only the at signs go.
    for at_sign in ("@", SMALL_AT, FULLWIDTH_AT):
        body = body.replace(at_sign, "")

    assert not may_mention(body)
    assert resolve_mentions_full(body, members) == NOTHING
    assert resolve_mentions(body, members) == NOTHING


@pytest.mark.parametrize(
    ("body", "mentions", "unresolved", "reasons"),
    [
        ("@bob", ["bob"], [], []),
        ("thanks, @alice", ["alice"], [], []),
        (f"{FULLWIDTH_AT}BOB and {SMALL_AT}Alice.", ["bob", "alice"], [], []),
        ("@bo\u200bb", ["bob"], [], ["invisible_characters"]),
        (f"{SMALL_AT}\u2066bob\u2069", ["bob"], [], ["invisible_characters"]),
        ("@b\u043eb", [], ["@b\u043eb"], ["confusable"]),
        (f"{FULLWIDTH_AT}a1ice", [], [f"{FULLWIDTH_AT}a1ice"], ["confusable"]),
        ("`@bob` but @alice", ["alice"], [], []),
        ("`@bob`", [], [], []),
        ("```\n@bob\n```", [], [], []),
        ("    @bob = 1", [], [], []),
        ("me@example.com", [], [], []),
        ("\\@bob", [], [], []),
        # Entities that decode to an at sign: no at sign in the body, no mention.
        ("&#64;bob &commat;alice &#xff20;bob &#xFE6B;alice", [], [], []),
        # Invisible, bidi and look-alike characters without an at sign.
        ("b\u043eb and bo\u200bb \u202eevil\u202c \uff42\uff4f\uff42", [], [], []),
        ("", [], [], []),
    ],
)
def test_edge_cases_resolve_the_same_with_and_without_the_gate(
    body: str, mentions: list[str], unresolved: list[str], reasons: list[str]
) -> None:
    full = resolve_mentions_full(body, MEMBERS)

    assert [member.handle for member in full.mentions] == mentions
    assert full.unresolved == unresolved
    assert [warning["reason"] for warning in full.warnings] == reasons
    assert resolve_mentions(body, MEMBERS) == full


def test_random_bodies_resolve_the_same_with_and_without_the_gate() -> None:
    fragments = [
        " @", " @", "@", f" {SMALL_AT}", f" {FULLWIDTH_AT}", SMALL_AT, "bob", "bob", "alice",
        "b\u043eb", "carol.dev", "\u200b", "\u202e", "\ufeff", " ", " ", "\n", "\n\n", "`",
        "```\n", "    ", "[", "](https://h/", ")", "<", ">", "\\", "&#64;", "&commat;",
        "&#xff20;", "me", ".", "_", "-", "*", "x", "#", "> ", "- ", "!", "\uff42\uff4f\uff42",
    ]  # fmt: skip
    mentioning = 0
    for seed in range(500):
        rng = random.Random(seed)
        body = "".join(rng.choice(fragments) for _ in range(rng.randint(0, 30)))
        full = resolve_mentions_full(body, MEMBERS)

        assert resolve_mentions(body, MEMBERS) == full, body
        mentioning += full != NOTHING
    # Enough of them mention someone for a wrongly skipped body to show up.
    assert mentioning >= 80


@pytest.mark.parametrize(
    "body",
    [
        TYPICAL,
        "Deploy done \u2014 all green \U0001f389, see https://host/u/bob and `x`.",
        "zero\u200bwidth, b\u043eb and \u202ebidi\u202c but no at sign",
    ],
)
def test_a_body_without_an_at_sign_is_not_parsed(
    body: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(body: str, members: object) -> MentionResult:
        raise AssertionError("the markdown was parsed")

    monkeypatch.setattr(mentions, "resolve_mentions_full", fail)

    assert resolve_mentions(body, MEMBERS) == NOTHING
