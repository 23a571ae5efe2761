"""Secret scrubbing (SPEC 3.5): tokens glued to a word in front, measured both ways.

``tokenghp_...`` is a GitHub token with a word stuck in front of it, as a
paste without a separator leaves it; the whole token goes, the word stays.
The near misses below are matched by a rule's pattern and must still come
back byte for byte: names that end in a token prefix (``laughs_``,
``task_test_``), tokens glued on both sides (the inside of a longer blob),
dotted names that hold ``eyJ``.

Prefixes are glued on at run time, as in test_scrubbing.py.
"""

import pytest

from common.scrubbing import ScrubResult, scrub
from common.scrubbing.rules import RULES
from tests.mailbox.test_scrubbing import (
    ANTHROPIC_API,
    AWS_KEY_ID,
    GITHUB_FINE_GRAINED,
    GITLAB_PAT,
    GOOGLE_ACCESS_TOKEN,
    GOOGLE_MAPS,
    JWT_HS256,
    NPM,
    PLUMB_KEY,
    PLUMB_TOKEN,
    PYPI,
    SLACK_USER,
    STRIPE_LIVE,
    STRIPE_WEBHOOK,
)

# The token of issue 23.
GITHUB_GLUED = "ghp" + "_Zq7Lm2Xc9Vb4Nw8Rt1Yp6Ks3Hd5Fg0Ja2Ue7Oi"
GITLAB_RUNNER_LEGACY = "GR1348941" + "aB3dE5gH7jK9mN1pQ3sT"
SLACK_APP = "xapp" + "-1-A05QX8B2K3L-5103862947712-9f8e7d6c5b4a"

# (kind, line, secret): the secret as it appears in the line, a word glued in front.
GLUED = [
    ("github_token", f"token{GITHUB_GLUED}", GITHUB_GLUED),
    ("github_token", f"xyz{GITHUB_GLUED}", GITHUB_GLUED),
    ("github_token", f"1{GITHUB_GLUED}", GITHUB_GLUED),
    ("github_token", f"_{GITHUB_GLUED}", GITHUB_GLUED),
    ("github_token", f"--{GITHUB_GLUED}", GITHUB_GLUED),
    ("github_token", f"my new one is token{GITHUB_GLUED} thanks", GITHUB_GLUED),
    ("github_token", f'export GH_TOKEN="token{GITHUB_GLUED}"', GITHUB_GLUED),
    ("github_token", f"pat{GITHUB_FINE_GRAINED}", GITHUB_FINE_GRAINED),
    ("gitlab_token", f"abc{GITLAB_PAT}", GITLAB_PAT),
    ("gitlab_token", f"runner{GITLAB_RUNNER_LEGACY}", GITLAB_RUNNER_LEGACY),
    ("stripe_key", f"abc{STRIPE_LIVE}", STRIPE_LIVE),
    ("stripe_key", f"hook{STRIPE_WEBHOOK}", STRIPE_WEBHOOK),
    ("aws_access_key_id", f"abc{AWS_KEY_ID}", AWS_KEY_ID),
    ("aws_access_key_id", f"id:key{AWS_KEY_ID} (rotated)", AWS_KEY_ID),
    ("slack_token", f"abc{SLACK_USER}", SLACK_USER),
    ("slack_token", f"app{SLACK_APP}", SLACK_APP),
    ("jwt", f"abc{JWT_HS256}", JWT_HS256),
    ("jwt", f"Set-Cookie: session=s1{JWT_HS256}; Path=/", JWT_HS256),
    ("plumb_session_token", f"abc{PLUMB_TOKEN}", PLUMB_TOKEN),
    ("plumb_project_key", f"abc{PLUMB_KEY}", PLUMB_KEY),
    ("anthropic_key", f"key{ANTHROPIC_API}", ANTHROPIC_API),
    ("google_api_key", f"key{GOOGLE_MAPS}", GOOGLE_MAPS),
    ("google_oauth_token", f"bearer{GOOGLE_ACCESS_TOKEN}", GOOGLE_ACCESS_TOKEN),
    ("npm_token", f"token{NPM}", NPM),
    ("pypi_token", f"token{PYPI}", PYPI),
    # Glued and wrapped by a terminal.
    (
        "github_token",
        f"$ gh auth token\ntoken{GITHUB_GLUED[:20]}\n{GITHUB_GLUED[20:]}\n$ ",
        f"{GITHUB_GLUED[:20]}\n{GITHUB_GLUED[20:]}",
    ),
]

# Matched by a rule's pattern with a word glued in front, and not a secret.
NEAR_MISSES = [
    # Names and words that end in a prefix, with no digit after it.
    "weighs_averageWeightOfTheItemsInTheCurrentCart = 0",
    "def task_test_handlesEmptyQueueGracefully():",
    "def network_test_reconnectsAfterTheServerRestarts(self):",
    "hugsxoxo-see-you-at-the-station-tomorrow",
    "pnpm_storeDirectoryForTheEntireWorkspaces ok",
    # Glued on both sides: the inside of a longer blob or identifier.
    f"state=Xk9{GITHUB_GLUED}-Qw3_Rt7",
    f"cursor=Qm9v{GITHUB_GLUED}_Zm9vYmFy",
    f"blob {'a1B2' * 4}{AWS_KEY_ID}_{'c3D4' * 4}",
    # Dotted names that hold "eyJ", shaped like a JWT.
    "hockeyJersey.numberOnTheBack.displayValueText",
    "monkeyJumper.heightInCm.maximumReached = 3",
    # A glued JWT whose header is not JSON.
    f"abceyJ{'hbGci' * 4}.{JWT_HS256.split('.', 1)[1]}",
]


@pytest.mark.parametrize(("kind", "line", "secret"), GLUED)
def test_a_token_glued_to_a_word_is_redacted_whole(kind: str, line: str, secret: str) -> None:
    result = scrub(line)

    assert secret not in result.text
    assert result.text == line.replace(secret, f"[REDACTED:{kind}]")
    assert result.scrubbed == [{"kind": kind, "count": 1}]


@pytest.mark.parametrize("line", NEAR_MISSES)
def test_a_glued_near_miss_survives_byte_for_byte(line: str) -> None:
    assert scrub(line) == ScrubResult(text=line, scrubbed=[])


@pytest.mark.parametrize("line", NEAR_MISSES)
def test_each_near_miss_is_matched_by_a_pattern_so_it_tests_the_glue_checks(line: str) -> None:
    assert any(rule.pattern.search(line) for rule in RULES)


def test_the_glued_word_is_kept_and_no_tail_of_the_token_is_left() -> None:
    body = f"tokenghp_ and then: token{GITHUB_GLUED}, 1{GITHUB_GLUED}."

    result = scrub(body)

    assert result.text == (
        "tokenghp_ and then: token[REDACTED:github_token], 1[REDACTED:github_token]."
    )
    assert result.scrubbed == [{"kind": "github_token", "count": 2}]
    assert scrub(result.text) == ScrubResult(text=result.text, scrubbed=[])
