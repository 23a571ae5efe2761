"""Secret scrubbing (SPEC 3.5): tokens pasted back to back, measured both ways.

``ghp_...ghp_...``, ``sk_live_...sk_live_...``, ``glpat-...glpat-...``, a JWT
and then a token: each token of a run of glued ones is a secret of its own,
redacted whole and counted, and no tail of any is left. Pairs and triples, of
one kind and of several, at a boundary and glued to a word. Identifiers and
blobs that hold a prefix in the middle come back byte for byte.

Prefixes are glued on at run time, as in test_scrubbing.py.
"""

import re
import string

import pytest

from common import limits, scrubbing
from common.scrubbing import ScrubResult, scrub
from common.scrubbing.rules import RULES
from tests.mailbox.test_scrubbing import (
    ANTHROPIC_ADMIN,
    ANTHROPIC_API,
    AWS_KEY_ID,
    AWS_STS_KEY_ID,
    GITHUB_APP,
    GITHUB_CLASSIC,
    GITHUB_FINE_GRAINED,
    GITHUB_OAUTH,
    GITLAB_DEPLOY,
    GITLAB_PAT,
    GITLAB_RUNNER,
    GOOGLE_ACCESS_TOKEN,
    GOOGLE_FIREBASE,
    GOOGLE_MAPS,
    GOOGLE_SERVICE_TOKEN,
    HUGGING_FACE,
    JWT_HS256,
    JWT_RS256,
    NPM,
    OPENAI_LEGACY,
    OPENAI_PROJECT,
    PLUMB_KEY,
    PLUMB_TOKEN,
    PYPI,
    SENDGRID,
    SLACK_BOT,
    SLACK_USER,
    STRIPE_LIVE,
    STRIPE_RESTRICTED,
    STRIPE_TEST,
    STRIPE_WEBHOOK,
    TWILIO_API_KEY,
)
from tests.mailbox.test_scrubbing_glue import GITHUB_GLUED
from tests.mailbox.test_scrubbing_lookalikes import ZWSP, fullwidth
from tests.speed import best_time, characters_through

# Name -> (kind, token), for the runs below.
TOKENS = {
    "ghp": ("github_token", GITHUB_CLASSIC),
    "ghp2": ("github_token", GITHUB_GLUED),
    "gho": ("github_token", GITHUB_OAUTH),
    "ghs": ("github_token", GITHUB_APP),
    "github_pat": ("github_token", GITHUB_FINE_GRAINED),
    "sk_live": ("stripe_key", STRIPE_LIVE),
    "sk_test": ("stripe_key", STRIPE_TEST),
    "rk_live": ("stripe_key", STRIPE_RESTRICTED),
    "whsec": ("stripe_key", STRIPE_WEBHOOK),
    "glpat": ("gitlab_token", GITLAB_PAT),
    "gldt": ("gitlab_token", GITLAB_DEPLOY),
    "glrt": ("gitlab_token", GITLAB_RUNNER),
    "jwt": ("jwt", JWT_HS256),
    "jwt_rs": ("jwt", JWT_RS256),
    "xoxb": ("slack_token", SLACK_BOT),
    "xoxp": ("slack_token", SLACK_USER),
    "akia": ("aws_access_key_id", AWS_KEY_ID),
    "asia": ("aws_access_key_id", AWS_STS_KEY_ID),
    "sk-ant": ("anthropic_key", ANTHROPIC_API),
    "sk-ant-admin": ("anthropic_key", ANTHROPIC_ADMIN),
    "sk-proj": ("openai_key", OPENAI_PROJECT),
    "sk-legacy": ("openai_key", OPENAI_LEGACY),
    "aiza": ("google_api_key", GOOGLE_MAPS),
    "aiza2": ("google_api_key", GOOGLE_FIREBASE),
    "ya29": ("google_oauth_token", GOOGLE_ACCESS_TOKEN),
    "ya29c": ("google_oauth_token", GOOGLE_SERVICE_TOKEN),
    "npm": ("npm_token", NPM),
    "pypi": ("pypi_token", PYPI),
    "hf": ("huggingface_token", HUGGING_FACE),
    "sg": ("sendgrid_key", SENDGRID),
    "sk": ("twilio_api_key", TWILIO_API_KEY),
    "plumb_key": ("plumb_project_key", PLUMB_KEY),
    "plumb_tok": ("plumb_session_token", PLUMB_TOKEN),
}

# (what goes in front, the tokens glued together, what goes behind).
RUNS = [
    # Two of one kind: the same token twice, or two of them.
    ("", "ghp ghp2", ""),
    ("", "ghp ghp", ""),
    ("", "gho ghs", ""),
    ("", "github_pat github_pat", ""),
    ("", "sk_live sk_test", ""),
    ("", "sk_live sk_live", ""),
    ("", "rk_live whsec", ""),
    ("", "glpat gldt", ""),
    ("", "glpat glpat", ""),
    ("", "jwt jwt_rs", ""),
    ("", "xoxb xoxp", ""),
    ("", "akia asia", ""),
    ("", "sk-ant sk-ant-admin", ""),
    ("", "aiza aiza2", ""),
    ("", "ya29 ya29c", ""),
    ("", "npm npm", ""),
    ("", "pypi pypi", ""),
    ("", "hf hf", ""),
    ("", "sg sg", ""),
    ("", "sk sk", ""),
    ("", "plumb_key plumb_tok", ""),
    # Two of different kinds.
    ("", "jwt ghp", ""),
    ("", "ghp jwt", ""),
    ("", "ghp sk_live", ""),
    ("", "sk_live ghp", ""),
    ("", "ghp glpat", ""),
    ("", "glpat ghp", ""),
    ("", "akia ghp", ""),
    ("", "ghp akia", ""),
    ("", "ghp hf", ""),
    ("", "ghp sk-proj", ""),
    ("", "sk-proj ghp", ""),
    ("", "ghp sk", ""),
    ("", "xoxb jwt", ""),
    ("", "jwt glpat", ""),
    ("", "aiza npm", ""),
    ("", "sk-ant glpat", ""),
    ("", "plumb_tok ghp", ""),
    # Three.
    ("", "ghp ghp2 gho", ""),
    ("", "sk_live sk_test rk_live", ""),
    ("", "glpat gldt glrt", ""),
    ("", "jwt jwt_rs jwt", ""),
    ("", "ghp sk_live jwt", ""),
    ("", "jwt glpat akia", ""),
    ("", "hf ghp sk-legacy", ""),
    ("", "xoxb aiza ya29", ""),
    # In context, and glued to a word in front.
    ("token", "ghp ghp2", ""),
    ("abc", "sk_live sk_test", ""),
    ("1", "glpat ghp", ""),
    ("x", "jwt ghp", ""),
    ("key", "akia asia", " (rotated)"),
    ("export GH_TOKEN=", "ghp ghp2", "\n"),
    ("my tokens: ", "ghp glpat jwt", ", thanks."),
    ('{"token": "', "sk_live ghp", '"}'),
    ("access_token%3D", "ghp ghp2", "%26state%3Dx"),
    ("MY_TOKEN_", "ghp ghp2", ""),
    ("state=Xk9", "ghp2 ghp", ""),
    ("cat ", "ghp ghp2", ".txt"),
    # A word that ends with a prefix ("ghs_") in front of a token.
    ("weighs_averageWeightOfTheItemsInTheCurrentCart", "ghp2", ""),
    # Longer runs than scrubbing makes passes.
    ("", " ".join(["sk_live"] * 12), ""),
    ("", " ".join(["akia", "asia"] * 6), ""),
]


def _body_and_stored(front: str, names: str, back: str) -> tuple[str, str, list[dict[str, object]]]:
    tokens = [TOKENS[name] for name in names.split()]
    body = front + "".join(token for _, token in tokens) + back
    stored = front + "".join(f"[REDACTED:{kind}]" for kind, _ in tokens) + back
    counts: dict[str, int] = {}
    for kind, _ in tokens:
        counts[kind] = counts.get(kind, 0) + 1
    return body, stored, [{"kind": kind, "count": count} for kind, count in counts.items()]


RUN_BODIES = [_body_and_stored(front, names, back)[0] for front, names, back in RUNS]

TOKEN_CHARACTERS = string.ascii_letters + string.digits + "_-"

# Matched by a rule's pattern or its prefix, with a prefix glued in the middle, and
# no token in them.
NOT_RUNS = [
    "task_live_ghp_x",
    "def task_live_ghp_xyz(self): pass",
    "npm_ghp_token_sk_live_test_handler = 1",
    "ghp_ghs_gho_ghu_ghr_ are the classic prefixes",
    "glpat-glpat-glpat- and xoxb-xoxb-",
    # Base64url and hex blobs with a prefix in the middle.
    "Zm9vYmFyghp_YmF6cXV4c2tfbGl2ZQsk_live_QmF6cXV4",
    "3f9a1c0eghp_7d2b9e4f1c0a8b7e9e6d5c4b3a2f1e0dsk_test_9e6d5c4b3a",
    f"cursor=Qm9v{GITHUB_GLUED}sk_live_Zm9vYmFy",
    f"blob Qm9vsk_live_{'Zm9vYmFyYmF6cXV4' * 2}_Zm9v{GITHUB_GLUED[:30]}",
    f"Xk9{GITHUB_GLUED}ghp_{'x' * 8}-Qw3",
    f"Xk9{GITHUB_GLUED}{GITHUB_CLASSIC}-Qw3_Rt7",
    f"a1B2{AWS_KEY_ID}{AWS_STS_KEY_ID}_c3D4",
    # A word glued to a token-shaped word, neither one a token.
    "laughs_totalCountForTheCurrentUserSessionghs_totalCountForTheCurrentUserSession",
    "hockeyJersey.numberOnTheBack.displayValueTexteyJersey.numberOnTheBack.displayValue",
]


@pytest.mark.parametrize(
    ("front", "names", "back"),
    RUNS,
    ids=[f"{front}{'+'.join(names.split())}{back}" for front, names, back in RUNS],
)
def test_each_token_of_a_glued_run_is_redacted_whole_and_counted(
    front: str, names: str, back: str
) -> None:
    body, stored, scrubbed = _body_and_stored(front, names, back)

    result = scrub(body)

    assert result.text == stored
    assert result.scrubbed == scrubbed
    for name in names.split():
        token = TOKENS[name][1]
        assert token[-12:] not in result.text
    assert scrub(result.text) == ScrubResult(text=result.text, scrubbed=[])


@pytest.mark.parametrize("line", NOT_RUNS)
def test_a_prefix_glued_in_an_identifier_or_a_blob_survives_byte_for_byte(line: str) -> None:
    assert scrub(line) == ScrubResult(text=line, scrubbed=[])


@pytest.mark.parametrize("line", NOT_RUNS)
def test_each_survivor_holds_a_glued_prefix_so_it_tests_the_cuts(line: str) -> None:
    glued = [
        match.start()
        for rule in RULES
        if rule.prefix is not None
        for match in re.finditer(rule.prefix, line)
        if match.start() > 0 and line[match.start() - 1] in TOKEN_CHARACTERS
    ]

    assert glued


def test_a_run_in_fullwidth_letters_or_with_a_zero_width_space_is_redacted_whole() -> None:
    body = f"a {fullwidth(GITHUB_CLASSIC + STRIPE_LIVE)} b {GITHUB_GLUED}{ZWSP}{GITLAB_PAT} c"

    result = scrub(body)

    assert result.text == (
        "a [REDACTED:github_token][REDACTED:stripe_key] b "
        f"[REDACTED:github_token]{ZWSP}[REDACTED:gitlab_token] c"
    )
    assert result.scrubbed == [
        {"kind": "github_token", "count": 2},
        {"kind": "stripe_key", "count": 1},
        {"kind": "gitlab_token", "count": 1},
    ]


def test_runs_on_consecutive_lines_are_each_cut() -> None:
    body = (
        f"GH_TOKEN={GITHUB_CLASSIC}\n{GITHUB_GLUED}{GITHUB_OAUTH}\n"
        f"{JWT_HS256}\n{STRIPE_LIVE}{STRIPE_TEST}"
    )

    result = scrub(body)

    assert result.text == (
        "GH_TOKEN=[REDACTED:github_token]\n[REDACTED:github_token][REDACTED:github_token]\n"
        "[REDACTED:jwt]\n[REDACTED:stripe_key][REDACTED:stripe_key]"
    )
    assert result.scrubbed == [
        {"kind": "github_token", "count": 3},
        {"kind": "jwt", "count": 1},
        {"kind": "stripe_key", "count": 2},
    ]


def test_a_key_whose_body_holds_a_prefix_random_bodies_hold_is_not_split() -> None:
    # sk- and hf_ are three characters: one key in a few thousand holds one
    # with a whole token behind it. Such a key stays one key, and so does a
    # run of two where the first could take in the second: whole, once.
    anthropic = ANTHROPIC_API[:60] + "sk-" + "Ab1" * 9
    openai_pair = OPENAI_LEGACY + OPENAI_LEGACY

    assert scrub(f"[{anthropic}]").text == "[[REDACTED:anthropic_key]]"
    assert scrub(f"[{openai_pair}]") == ScrubResult(
        text="[[REDACTED:openai_key]]", scrubbed=[{"kind": "openai_key", "count": 1}]
    )


def test_the_rules_read_a_blank_only_where_two_whole_tokens_meet() -> None:
    body = f"x {GITHUB_CLASSIC}{STRIPE_LIVE}{JWT_HS256} task_live_ghp_x"
    stripe_at = 2 + len(GITHUB_CLASSIC)
    jwt_at = stripe_at + len(STRIPE_LIVE)

    cuts = scrubbing.runs.Runs(RULES).cuts(body)
    split = scrubbing.runs.split(body, cuts)

    assert cuts == [stripe_at, jwt_at]
    assert split.text == f"x {GITHUB_CLASSIC} {STRIPE_LIVE} {JWT_HS256} task_live_ghp_x"
    assert [split.to_body(p) for p in (2, stripe_at + 1, jwt_at + 2, len(split.text))] == [
        2,
        stripe_at,
        jwt_at,
        len(body),
    ]


def glued_tokens(size: int) -> str:
    unit = GITHUB_CLASSIC + STRIPE_LIVE + GITLAB_PAT + JWT_HS256 + AWS_KEY_ID + HUGGING_FACE
    return (unit * (size // len(unit) + 1))[:size]


# Runs of prefixes crafted for the cuts: many prefixes, chains every few of them,
# pieces that fail only at their last character.
CRAFTED = {
    "glued_tokens": glued_tokens,
    "slack_prefixes": lambda size: ("xoxb-" * (size // 5 + 1))[:size],
    "jwt_prefixes": lambda size: ("eyJ" * (size // 3 + 1))[:size],
    "jwt_chains": lambda size: ("eyJhbGci.eyJzdWIi.T8u5mM9sZZ" * (size // 28 + 1))[:size],
    "akia_prefixes": lambda size: ("AKIA" * (size // 4 + 1))[:size],
    "github_short": lambda size: (("ghp_" + "a1" * 17 + "b") * (size // 39 + 1))[:size],
    "hf_after_github": lambda size: ((GITHUB_CLASSIC + "hf_") * (size // 43 + 1))[:size],
    # One JWT whose header runs over hundreds of GitLab-shaped pieces.
    "run_inside_a_token": lambda size: (
        ("eyJx" + ("glpat-" + "a1" * 10) * (size // 26 + 1))[: size - 19] + ".Xk9Qw.Zm9vYmFyYmF6"
    ),
}


@pytest.mark.parametrize("shape", CRAFTED)
def test_cutting_hands_each_character_to_the_rules_a_bounded_number_of_times(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counted, not timed: twice the body costs at most twice the characters."""
    make = CRAFTED[shape]

    def work(size: int) -> int:
        return characters_through(
            monkeypatch, [(scrubbing.runs, "_token")], lambda: scrub(make(size))
        )

    half, full = work(limits.BODY_MAX_BYTES // 2), work(limits.BODY_MAX_BYTES)
    assert full <= 2 * half + 1000
    assert full <= 40 * limits.BODY_MAX_BYTES


def test_a_16_kb_run_of_glued_tokens_is_scrubbed_quickly() -> None:
    # Some four hundred tokens back to back. The bound is some five times what it takes.
    body = glued_tokens(limits.BODY_MAX_BYTES)

    result = scrub(body)

    assert "[REDACTED:" in result.text
    assert best_time(lambda: scrub(body)) < 0.050
