"""Secret scrubbing (SPEC 3.5): secrets in look-alike or invisible characters, both ways.

A token typed in fullwidth or mathematical letters, or with zero-width
characters inside it, is found in a folded view of the body (NFKC, invisible
characters left out) and redacted over the characters it was sent in, the
invisible ones inside included. The view is only read: text that holds no
secret (fullwidth CJK punctuation, emoji joined by ZWJ, soft hyphens, bidi
marks) is stored exactly as sent.

Characters outside ASCII are written as escapes or built at run time, so that
what each line holds can be read.
"""

import pytest

from common import scrubbing
from common.scrubbing import ScrubResult, lookalikes, scrub
from tests.mailbox.test_scrubbing import (
    AWS_KEY_ID,
    JWT_HS256,
    OPENAI_LEGACY,
    PLUMB_TOKEN,
    STRIPE_LIVE,
)
from tests.mailbox.test_scrubbing_glue import GITHUB_GLUED
from tests.speed import best_time

ZWSP, ZWNJ, ZWJ, WORD_JOINER, SOFT_HYPHEN = "\u200b", "\u200c", "\u200d", "\u2060", "\u00ad"
LRM, BOM, VS16, NBSP = "\u200e", "\ufeff", "\ufe0f", "\u00a0"


def fullwidth(text: str) -> str:
    """``text`` with each printable ASCII character in its fullwidth form (U+FF01-U+FF5E)."""
    return "".join(chr(ord(ch) + 0xFEE0) if "!" <= ch <= "~" else ch for ch in text)


def bold(text: str) -> str:
    """``text`` with letters and digits in mathematical bold (U+1D400...)."""
    out = []
    for ch in text:
        if "A" <= ch <= "Z":
            out.append(chr(0x1D400 + ord(ch) - ord("A")))
        elif "a" <= ch <= "z":
            out.append(chr(0x1D41A + ord(ch) - ord("a")))
        elif "0" <= ch <= "9":
            out.append(chr(0x1D7CE + ord(ch) - ord("0")))
        else:
            out.append(ch)
    return "".join(out)


def sprinkle(text: str, invisible: str, every: int = 7) -> str:
    """``text`` with ``invisible`` after every ``every`` characters."""
    return invisible.join(text[i : i + every] for i in range(0, len(text), every))


FW_GITHUB = fullwidth(GITHUB_GLUED)
FW_PREFIX_GITHUB = fullwidth("ghp_") + GITHUB_GLUED[4:]
BOLD_GITHUB = bold("ghp") + "_" + bold(GITHUB_GLUED[4:])
ZW_GITHUB = GITHUB_GLUED[:2] + ZWSP + GITHUB_GLUED[2:]
ZWJ_GITHUB = sprinkle(GITHUB_GLUED, ZWJ)
JOINERS_GITHUB = sprinkle(GITHUB_GLUED, ZWNJ + WORD_JOINER, 5)
SHY_GITHUB = GITHUB_GLUED[:2] + SOFT_HYPHEN + GITHUB_GLUED[2:]
LRM_GITHUB = GITHUB_GLUED[:9] + LRM + GITHUB_GLUED[9:]
VS_GITHUB = GITHUB_GLUED[:20] + VS16 + BOM + GITHUB_GLUED[20:]
ZW_PLUMB_TOKEN = sprinkle(PLUMB_TOKEN, ZWSP, 11)
FW_AWS_KEY_ID = AWS_KEY_ID[:4] + fullwidth(AWS_KEY_ID[4:])
FW_STRIPE = fullwidth(STRIPE_LIVE)
ZW_JWT = sprinkle(JWT_HS256, ZWSP, 13)
OPENAI_SPLIT = OPENAI_LEGACY[:30] + ZWSP + OPENAI_LEGACY[30:]
FW_QUOTE = fullwidth('"')

# (kind, line, secret): the secret as it appears in the line, disguised.
DISGUISED = [
    ("github_token", FW_GITHUB, FW_GITHUB),
    ("github_token", f"new token: {FW_GITHUB} (rotated)", FW_GITHUB),
    ("github_token", FW_PREFIX_GITHUB, FW_PREFIX_GITHUB),
    ("github_token", BOLD_GITHUB, BOLD_GITHUB),
    ("github_token", f"export GITHUB_TOKEN={ZW_GITHUB}", ZW_GITHUB),
    ("github_token", f"token {ZWJ_GITHUB} ok", ZWJ_GITHUB),
    ("github_token", JOINERS_GITHUB, JOINERS_GITHUB),
    ("github_token", f"GH_TOKEN='{SHY_GITHUB}'", SHY_GITHUB),
    ("github_token", LRM_GITHUB, LRM_GITHUB),
    ("github_token", VS_GITHUB, VS_GITHUB),
    ("plumb_session_token", f"PLUMB_TOKEN={ZW_PLUMB_TOKEN}", ZW_PLUMB_TOKEN),
    ("aws_access_key_id", f"key id {FW_AWS_KEY_ID}", FW_AWS_KEY_ID),
    ("stripe_key", f"stripe: {FW_STRIPE}", FW_STRIPE),
    ("jwt", f"id_token={ZW_JWT}", ZW_JWT),
    # The body alone matches the first part of the key: no tail is left behind.
    ("openai_key", f"OPENAI_API_KEY={OPENAI_SPLIT}", OPENAI_SPLIT),
    # Context rules read the folded separators too.
    ("password_assignment", f"password{fullwidth(':')}hunter2hunter2", "hunter2hunter2"),
    ("password_assignment", f"password:{NBSP}hunter2hunter2", "hunter2hunter2"),
    ("password_assignment", f"{fullwidth('DB_PASSWORD=')}Tr0ub4dor&3", "Tr0ub4dor&3"),
    # A fullwidth quote ends the value only in the view: the union is redacted.
    ("password_assignment", f"password=abc{FW_QUOTE}def1", f"abc{FW_QUOTE}def1"),
    # Glued and disguised, wrapped and disguised.
    ("github_token", f"token{FW_GITHUB}", FW_GITHUB),
    (
        "github_token",
        f"$ gh auth token\n{FW_GITHUB[:20]}\n{FW_GITHUB[20:]}\n$ ",
        f"{FW_GITHUB[:20]}\n{FW_GITHUB[20:]}",
    ),
]

# Text that folding changes and that holds no secret: stored byte for byte.
NOT_DISGUISED = [
    fullwidth("ABC") + "\u682a\u5f0f\u4f1a\u793e " + fullwidth("2024") + "\u5e74",
    fullwidth("Token:") + "\u672a\u8a2d\u5b9a",
    "\u30c7\u30d7\u30ed\u30a4\u5b8c\u4e86\uff08\u5168\u90e8\u30b0\u30ea\u30fc\u30f3\uff09\u3002",
    fullwidth("GitHub tokens start with ghp_ and 36 letters and digits"),
    fullwidth("git checkout 9fceb02d0ae598e95dc970b74767f19372d61af8"),
    fullwidth("request 6f1c2d3e-4b5a-4c7d-8e9f-0a1b2c3d4e5f failed"),
    fullwidth("https://example.com/search?q=plumb&page=2"),
    bold("Deploy done") + ", all green",
    f"family photo \U0001f468{ZWJ}\U0001f469{ZWJ}\U0001f467 and \u2764{VS16} \U0001f44d\U0001f3fd",
    f"soft{SOFT_HYPHEN}hyphen{SOFT_HYPHEN}ation and zero{ZWSP}width{ZWSP}spaces in prose",
    f"{LRM}\u05e9\u05dc\u05d5\u05dd{LRM} and \u0645\u0631\u062d\u0628\u0627\u061c",
    f"\u0915\u094d{ZWJ}\u0937 and \u0915\u094d{ZWNJ}\u0937",
    f"Mot de passe{NBSP}: demander {NBSP}\u00e0 l\u2019administrateur",
    "E = mc\u00b2; x\u2081 + x\u2082; \ufb01le \ufb02ow \u2460 \u2161",
    f"{BOM}plain text after a byte order mark",
    f"The prefix is {fullwidth('ghp_')} and the rest is random.",
    f"{fullwidth('sk_live_')} keys are secret; {fullwidth('pk_live_')} keys are public.",
    fullwidth("max_tokens=4096, temperature=0.2"),
    f"AccountKey={fullwidth('<your-account-key>')}",
    f"password{fullwidth(':')} {fullwidth('<your-password>')}",
]


@pytest.mark.parametrize(("kind", "line", "secret"), DISGUISED)
def test_a_disguised_secret_is_redacted_over_the_characters_it_was_sent_in(
    kind: str, line: str, secret: str
) -> None:
    result = scrub(line)

    assert secret in line
    assert result.text == line.replace(secret, f"[REDACTED:{kind}]")
    assert result.scrubbed == [{"kind": kind, "count": 1}]
    assert scrub(result.text) == ScrubResult(text=result.text, scrubbed=[])


@pytest.mark.parametrize("line", NOT_DISGUISED)
def test_text_that_folding_changes_is_stored_exactly_as_sent(line: str) -> None:
    assert lookalikes.view(line) is not None
    assert scrub(line) == ScrubResult(text=line, scrubbed=[])


def test_invisible_characters_inside_a_secret_go_with_it_and_those_around_it_stay() -> None:
    body = f"{ZWSP}a {GITHUB_GLUED[:5]}{ZWSP}{ZWNJ}{GITHUB_GLUED[5:]}{ZWJ} b \U0001f44d\U0001f3fd"

    result = scrub(body)

    assert result.text == f"{ZWSP}a [REDACTED:github_token]{ZWJ} b \U0001f44d\U0001f3fd"


def test_the_view_maps_each_folded_character_to_the_one_it_came_from() -> None:
    body = f"a{ZWSP}\ufb01{fullwidth('Z')}"

    view = lookalikes.view(body)

    assert view is not None
    assert view.text == "afiZ"
    assert view.origins == [0, 2, 2, 3]
    assert view.to_body((1, 3)) == (2, 3)
    assert view.to_body((0, 4)) == (0, 4)


@pytest.mark.parametrize(
    "body",
    ["plain ASCII", "d\u00e9j\u00e0 vu \u2014 caf\u00e9 \U0001f389", "\u65e5\u672c\u8a9e"],
)
def test_text_that_folding_leaves_alone_has_no_view(body: str) -> None:
    assert lookalikes.view(body) is None


@pytest.mark.parametrize("line", [NOT_DISGUISED[i] for i in (0, 2, 7, 8, 9, 10)])
def test_non_ascii_prose_without_a_secret_skips_the_rule_table(
    line: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(text: str) -> ScrubResult:
        raise AssertionError("the rule table ran")

    monkeypatch.setattr(scrubbing, "scrub_full", fail)

    assert scrub(line) == ScrubResult(text=line, scrubbed=[])


def test_a_16_kb_body_of_folded_text_is_scrubbed_quickly() -> None:
    # Fullwidth CJK punctuation, emoji joined by ZWJ, fullwidth letters: every
    # character goes through the view. The bound is some twenty times what it takes.
    unit = NOT_DISGUISED[2] + NOT_DISGUISED[8] + fullwidth("ghp_ password= ")
    body = (unit * (16384 // len(unit.encode())))[:5400]

    assert best_time(lambda: scrub(body)) < 0.050
