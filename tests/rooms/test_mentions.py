"""Corpus tests for mention extraction and resolution (SPEC 4.2 step 6).

Pure functions, no database. Each corpus case is a message body, the room's members and
the expected mentions (handles), unresolved tokens and warnings, written out in full.
Non-ASCII characters are written as escapes so that the look-alikes can be told apart.
"""

import pytest

from common import limits
from common.text import normalize_handle, visible
from rooms import mentions
from rooms.mentions import Member, extract_mention_tokens, resolve_mentions
from tests.speed import best_time, characters_through

MEMBERS = (
    Member(handle="bob", display_name="Bob"),
    Member(handle="alice", display_name="Alice"),
    Member(handle="carol.dev", display_name="Carol"),
    Member(handle="dave_", display_name="Dave"),
    Member(handle="eve-2", display_name="Eve"),
)
# Handles that end in characters which are otherwise trailing punctuation.
MEMBERS_WITH_PUNCTUATED_HANDLES = (
    *MEMBERS,
    Member(handle="bob.", display_name="Bob with a dot"),
    Member(handle="dave", display_name="Dave without underscore"),
)


def case(
    case_id: str,
    body: str,
    mentions: list[str],
    unresolved: list[str],
    warnings: list[dict[str, str]],
    members: tuple[Member, ...] = MEMBERS,
) -> object:
    return pytest.param(body, members, mentions, unresolved, warnings, id=case_id)


CORPUS = [
    # Plain prose and block structure.
    case("plain", "Hi @bob", ["bob"], [], []),
    case("start_of_lines", "@alice can you review?\n@bob too", ["alice", "bob"], [], []),
    case("soft_and_hard_breaks", "over to\n@bob and  \n@alice", ["bob", "alice"], [], []),
    case(
        "lists",
        "- @bob\n- [ ] @alice\n1. @carol.dev",
        ["bob", "alice", "carol.dev"],
        [],
        [],
    ),
    case("headings", "# @bob\n\nSetext @alice\n---", ["bob", "alice"], [], []),
    case("blockquotes", "> @bob said\n>\n> > @alice agreed", ["bob", "alice"], [], []),
    case(
        "emphasis",
        "**@bob** and _@alice_ and *@carol.dev*.",
        ["bob", "alice", "carol.dev"],
        [],
        [],
    ),
    case("table_row", "| who | what |\n|---|---|\n| @bob | @alice |", ["bob", "alice"], [], []),
    case(
        "opening_brackets_and_quotes",
        "(@bob) \"@alice\" '@carol.dev' [@dave_] {@eve-2}",
        ["bob", "alice", "carol.dev", "dave_", "eve-2"],
        [],
        [],
    ),
    case("apostrophe_ends_token", "@bob's review", ["bob"], [], []),
    # Code is never a mention.
    case("inline_code", "use `@bob` or ``@alice``", [], [], []),
    case("inline_code_beside_prose", "`@bob` says hi to @alice", ["alice"], [], []),
    case("fenced_backticks", "```\n@bob\n```\n@alice", ["alice"], [], []),
    case("fenced_tildes", "~~~python\n@property\ndef x(): ...\n~~~", [], [], []),
    case("indented_code", "text\n\n    @bob = 1\n", [], [], []),
    case("decorator_outside_code", "@property is a decorator", [], ["@property"], []),
    # Addresses, URLs, links and images.
    case("email_addresses", "mail me@example.com or bob@example.com", [], [], []),
    case("email_autolink", "<bob@example.com>", [], [], []),
    case("bare_urls", "see https://host/@bob and http://x.io/@alice/posts", [], [], []),
    case("url_autolink", "<https://host/@bob>", [], [], []),
    case("link_text", "[@bob](https://example.com/u/alice)", ["bob"], [], []),
    case("link_target_and_title", '[profile](https://host/@alice "@carol.dev")', [], [], []),
    case("reference_definition", "[profile]\n\n[profile]: https://host/@bob", [], [], []),
    case("image_alt_and_src", "![@bob](https://img/@alice.png)", [], [], []),
    case("linked_image", "[![@bob](https://img/x.png)](https://host/@alice)", [], [], []),
    # Glued to the character before the at sign.
    case("glued_punctuation", "a.@bob x-@bob y+@bob z/@bob q@bob", [], [], []),
    case("glued_through_invisible", "me\u200b@example.com", [], [], []),
    case("glued_to_emphasised_word", "**x**@bob", [], [], []),
    case("adjacent_mentions_are_an_address", "@bob@alice and @bob@mastodon.social", [], [], []),
    case("double_at_sign", "@@bob", [], [], []),
    case("lone_at_signs", "meet @ 5pm, @ @- @_bob @. @", [], [], []),
    # Escaped at signs and raw HTML.
    case("escaped_at_sign", "\\@bob and &#64;alice", [], [], []),
    case(
        "raw_html",
        '<span>@bob</span> <a title="@eve-2">x</a>\n\n<div>\n@alice\n</div>\n\n<!-- @dave_ -->',
        ["bob"],
        [],
        [],
    ),
    # Trailing punctuation.
    case("trailing_period", "Thanks @bob.", ["bob"], [], []),
    case("trailing_comma_and_colon", "@bob, @alice: please", ["bob", "alice"], [], []),
    case("trailing_combinations", "ping @bob.- and @alice_, ok @bob-_.", ["bob", "alice"], [], []),
    case("dot_inside_handle", "ask @carol.dev.", ["carol.dev"], [], []),
    case("underscore_handle", "@dave_ and @dave_. and @dave__", ["dave_"], [], []),
    case("underscore_handle_needs_its_underscore", "@dave.", [], ["@dave"], []),
    case("hyphen_handle", "@eve-2- @eve-2.,", ["eve-2"], [], []),
    case(
        "handle_ending_in_dot_takes_the_dot",
        "Thanks @bob. Also @bob!",
        ["bob.", "bob"],
        [],
        [],
        MEMBERS_WITH_PUNCTUATED_HANDLES,
    ),
    case(
        "longest_handle_wins",
        "@dave_ then @dave, then @dave-",
        ["dave_", "dave"],
        [],
        [],
        MEMBERS_WITH_PUNCTUATED_HANDLES,
    ),
    case("unknown_handle", "cc @nobdy.", [], ["@nobdy"], []),
    case("unknown_handle_punctuation_stripped", "@nobdy_-. and @nobdy", [], ["@nobdy"], []),
    case("display_name_is_not_a_handle", "@Carol and @Bob", ["bob"], ["@Carol"], []),
    # Case and compatibility forms.
    case("upper_case", "@BOB and @Alice", ["bob", "alice"], [], []),
    case("fullwidth_letters", "@\uff42\uff4f\uff42 and \uff20alice", ["bob", "alice"], [], []),
    # Duplicates: each member once, each distinct typed string once.
    case(
        "duplicates",
        "@bob @bob @nobdy @nobdy. @NOBDY @bob",
        ["bob"],
        ["@nobdy", "@NOBDY"],
        [],
    ),
    case(
        "duplicate_invisible_variants",
        "@bob @BOB @bo\u200bb @bo\u200bb",
        ["bob"],
        [],
        [{"typed": "@bo\u200bb", "handle": "bob", "reason": "invisible_characters"}],
    ),
    # Invisible characters inside a handle: resolves, with a warning.
    case(
        "zero_width_space",
        "hey @bo\u200bb",
        ["bob"],
        [],
        [{"typed": "@bo\u200bb", "handle": "bob", "reason": "invisible_characters"}],
    ),
    case(
        "zero_width_non_joiner",
        "@ali\u200cce",
        ["alice"],
        [],
        [{"typed": "@ali\u200cce", "handle": "alice", "reason": "invisible_characters"}],
    ),
    case(
        "zero_width_joiner",
        "@carol\u200d.dev",
        ["carol.dev"],
        [],
        [{"typed": "@carol\u200d.dev", "handle": "carol.dev", "reason": "invisible_characters"}],
    ),
    case(
        "word_joiner",
        "@dave\u2060_",
        ["dave_"],
        [],
        [{"typed": "@dave\u2060_", "handle": "dave_", "reason": "invisible_characters"}],
    ),
    case(
        "byte_order_mark",
        "@\ufeffeve-2",
        ["eve-2"],
        [],
        [{"typed": "@\ufeffeve-2", "handle": "eve-2", "reason": "invisible_characters"}],
    ),
    case(
        "right_to_left_override",
        "@b\u202eob",
        ["bob"],
        [],
        [{"typed": "@b\u202eob", "handle": "bob", "reason": "invisible_characters"}],
    ),
    case(
        "bidi_isolates",
        "@\u2066bob\u2069 and @\u2067al\u2068ice\u2069",
        ["bob", "alice"],
        [],
        [
            {"typed": "@\u2066bob\u2069", "handle": "bob", "reason": "invisible_characters"},
            {
                "typed": "@\u2067al\u2068ice\u2069",
                "handle": "alice",
                "reason": "invisible_characters",
            },
        ],
    ),
    case(
        "bidi_marks",
        "@al\u200eice\u200f.",
        ["alice"],
        [],
        [{"typed": "@al\u200eice\u200f", "handle": "alice", "reason": "invisible_characters"}],
    ),
    case(
        "invisible_then_trailing_period",
        "Thanks @bob\u200b.",
        ["bob"],
        [],
        [{"typed": "@bob\u200b", "handle": "bob", "reason": "invisible_characters"}],
    ),
    case("invisible_inside_unknown_handle", "@nob\u200bdy", [], ["@nob\u200bdy"], []),
    # Look-alike characters: not resolved, with a warning naming the member.
    case(
        "cyrillic_o",
        "@b\u043eb please",
        [],
        ["@b\u043eb"],
        [{"typed": "@b\u043eb", "handle": "bob", "reason": "confusable"}],
    ),
    case(
        "greek_omicron",
        "@b\u03bfb",
        [],
        ["@b\u03bfb"],
        [{"typed": "@b\u03bfb", "handle": "bob", "reason": "confusable"}],
    ),
    case(
        "cyrillic_capital_letters",
        "@\u0410LICE",
        [],
        ["@\u0410LICE"],
        [{"typed": "@\u0410LICE", "handle": "alice", "reason": "confusable"}],
    ),
    case(
        "cyrillic_ie_before_trailing_period",
        "ask @carol.d\u0435v.",
        [],
        ["@carol.d\u0435v"],
        [{"typed": "@carol.d\u0435v", "handle": "carol.dev", "reason": "confusable"}],
    ),
    case(
        "digit_one_for_letter_l",
        "@a1ice",
        [],
        ["@a1ice"],
        [{"typed": "@a1ice", "handle": "alice", "reason": "confusable"}],
    ),
    case(
        "look_alike_with_invisible_character",
        "@b\u043e\u200bb",
        [],
        ["@b\u043e\u200bb"],
        [{"typed": "@b\u043e\u200bb", "handle": "bob", "reason": "confusable"}],
    ),
    case("other_script_handle", "@\u0431\u043e\u0431", [], ["@\u0431\u043e\u0431"], []),
    case(
        "cyrillic_letters_extend_token",
        "@bob\u043e\u0447\u043a\u0430",
        [],
        ["@bob\u043e\u0447\u043a\u0430"],
        [],
    ),
]


@pytest.mark.parametrize(("body", "members", "mentions", "unresolved", "warnings"), CORPUS)
def test_corpus(
    body: str,
    members: tuple[Member, ...],
    mentions: list[str],
    unresolved: list[str],
    warnings: list[dict[str, str]],
) -> None:
    result = resolve_mentions(body, members)

    assert [member.handle for member in result.mentions] == mentions
    assert result.unresolved == unresolved
    assert result.warnings == warnings


def test_mentions_return_the_members_with_their_display_names() -> None:
    result = resolve_mentions("@alice and @bob", iter(MEMBERS))

    assert result.mentions == [
        Member(handle="alice", display_name="Alice"),
        Member(handle="bob", display_name="Bob"),
    ]


def test_no_members_leaves_every_token_unresolved() -> None:
    result = resolve_mentions("@bob and @b\u043eb", [])

    assert result.mentions == []
    assert result.unresolved == ["@bob", "@b\u043eb"]
    assert result.warnings == []


def test_extract_keeps_duplicates_and_trailing_punctuation_in_order() -> None:
    body = "@bob. then @bob and @nobdy, `@code` me@example.com @bo\u200bb"

    assert extract_mention_tokens(body) == ["@bob.", "@bob", "@nobdy", "@bo\u200bb"]


def test_a_long_run_of_trailing_punctuation_is_cheap_and_stripped() -> None:
    result = resolve_mentions("@nobdy" + "." * 16000, MEMBERS)

    assert result.unresolved == ["@nobdy"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("bob", "bob"),
        ("BoB", "bob"),
        ("\uff42\uff4f\uff42", "bob"),
        ("bo\u200bb", "bob"),
        ("\u2066b\u202eob\u2069", "bob"),
        ("\u00adbob\ufeff", "bob"),
        ("\u3164bob", "bob"),
        ("Stra\u00dfe", "strasse"),
        ("b\u043eb", "b\u043eb"),
    ],
)
def test_normalize_handle(text: str, expected: str) -> None:
    assert normalize_handle(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Bob", "Bob"),
        ("Jos\u00e9 \u0411\u043e\u0431", "Jos\u00e9 \u0411\u043e\u0431"),
        ("Bo\u200bb", "Bo<U+200B>b"),
        ("\u202eevil", "<U+202E>evil"),
        ("a\u2066b\u2069", "a<U+2066>b<U+2069>"),
        ("\u00adsoft", "<U+00AD>soft"),
        ("tag\U000e0041", "tag<U+E0041>"),
        ("line\nbreak\x07", "line<U+000A>break<U+0007>"),
    ],
)
def test_visible(text: str, expected: str) -> None:
    assert visible(text) == expected


# --- speed (issue #15) ------------------------------------------------------------------
# A send resolves its body's mentions before it takes the room lock
# (rooms.services.sending), but still on a request's time. Each shape is made to be slow
# for one pass of the resolver; its generator makes a body of about ``size`` bytes.
CRAFTED = {
    "issue_15_dots": lambda size: "@agent-1 @x" + "." * (size - 11),
    "trailing_dashes": lambda size: "@x" + "-" * (size - 2),
    "handle_characters": lambda size: "@" + "a" * (size - 1),
    "handle_characters_then_dots": lambda size: "@" + "a" * (size // 2) + "." * (size // 2 - 1),
    "dots_between_invisibles": lambda size: "@bob" + ".\u200b" * (size // 4 - 1),
    "invisible_characters": lambda size: "@bob" + "\u200b" * (size // 3 - 2),
    "invisible_before_at_signs": lambda size: ("\u200b" * 9 + "@") * (size // 28),
    "at_signs": lambda size: "@" * size,
    "many_tokens": lambda size: "@a " * (size // 3),
    "addresses": lambda size: "@bob@" * (size // 5),
    "look_alikes": lambda size: "@b\u043eb " * (size // 7),
    "emphasis_around_mentions": lambda size: "*@bob " * (size // 6),
}


@pytest.mark.parametrize("shape", CRAFTED)
def test_resolution_hands_each_character_to_the_text_rules_a_bounded_number_of_times(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counted, not timed: twice the body costs at most twice the characters."""
    make = CRAFTED[shape]
    rules = [(mentions, "normalize_handle"), (mentions, "_skeleton"), (mentions, "_candidates")]

    def work(size: int) -> int:
        return characters_through(monkeypatch, rules, lambda: resolve_mentions(make(size), MEMBERS))

    half, full = work(limits.BODY_MAX_BYTES // 2), work(limits.BODY_MAX_BYTES)
    assert full <= 2 * half + 1000


def test_each_token_costs_the_same_in_a_room_of_a_thousand_members() -> None:
    body = "@z " * (limits.BODY_MAX_BYTES // 3)
    few = [Member(handle=f"agent-{n}", display_name="") for n in range(10)]
    many = [Member(handle=f"agent-{n}", display_name="") for n in range(1000)]
    resolve_mentions(body, many)  # builds the confusables table once

    # The longest look-alike is measured once per body, not once per token: 0.9-1.2x the
    # time of a room of ten here, 3.2-4.8x when it was measured per token.
    assert best_time(lambda: resolve_mentions(body, many), runs=5) < 2 * best_time(
        lambda: resolve_mentions(body, few), runs=5
    )
