"""The rule table: which secrets are recognised, in priority order, and how.

Each rule carries, next to its pattern, the anchors the prefilter uses to skip
a body in which the pattern cannot match (see ``common.scrubbing.prefilter``).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from common.scrubbing.refine import (
    Span,
    glue_any,
    glue_jwt,
    glue_random,
    is_dummy_token,
    refine_assignment,
    refine_basic,
    refine_bearer,
    refine_curl_user,
    refine_flag,
    refine_keep,
    refine_literal,
    refine_mixed_case,
    refine_mysql_password,
    refine_password_assignment,
    refine_password_flag,
    refine_sshpass,
    refine_url_password,
    secret_span,
)


@dataclass(frozen=True)
class Rule:
    kind: str
    pattern: re.Pattern[str]
    # Narrows or vetoes the span to redact; context rules use it to tell a
    # literal secret from a reference, a type or a placeholder.
    refine: Callable[[re.Match[str], Span], Span | None] | None = None
    # Regexes of which at least one matches wherever ``pattern`` matches:
    # ``anchors`` in the text itself, ``folded_anchors`` (lower case) in the
    # text after ``prefilter.fold``, for the parts of the pattern that are
    # case-insensitive. Each is a weakening of a stretch of the pattern that
    # every match goes through. A rule with neither cannot be prefiltered, and
    # then no body is skipped.
    anchors: tuple[str, ...] = ()
    folded_anchors: tuple[str, ...] = ()
    # Whether a token of this rule may be cut in two by a line break, as a
    # terminal wraps it (``common.scrubbing.wrap``); such a rule has ``anchors``
    # (its prefix). ``full_length``: the length of a whole token, where the
    # pattern also accepts shorter ones.
    wraps: bool = False
    full_length: int | None = None
    # Whether a token glued to a word in front of it (tokenghp_..., abcAKIA...)
    # is one, given the text and its span; ``_token_start(..., glue=True)``
    # marks such a match. Without it, a glued match is dropped.
    glue: Callable[[str, Span], bool] | None = None
    # What every token of a prefixed format starts with (a regex): where a
    # token pasted right behind another one begins (``common.scrubbing.runs``).
    # ``prefix_in_bodies``: whether random token bodies hold the prefix and a
    # whole token behind it now and then (sk- and hf_, three characters before
    # a plain run); such a token is cut off from one in front only where that
    # one cannot take it in as its own.
    prefix: str | None = None
    prefix_in_bodies: bool = False

    @cached_property
    def compiled_anchors(self) -> tuple[re.Pattern[str], ...]:
        return tuple(re.compile(anchor) for anchor in self.anchors)

    def span(self, match: re.Match[str]) -> Span | None:
        span = secret_span(match)
        if _is_glued(match) and (self.glue is None or not self.glue(match.string, span)):
            return None
        if self.refine is not None:
            return self.refine(match, span)
        return None if is_dummy_token(match.string[span[0] : span[1]]) else span


_TOKEN_CHAR = r"[A-Za-z0-9_-]"
# Group names are unique within a pattern, and a pattern may hold several prefixes.
_GLUE_GROUPS = itertools.count()


def _is_glued(match: re.Match[str]) -> bool:
    """Whether ``match`` is a token whose prefix is glued to a word (see ``_token_start``)."""
    return any(name.startswith("glued") and match.start(name) != -1 for name in match.re.groupindex)


def _token_start(
    prefix: str, *, word_glue: bool = True, token_char: str = _TOKEN_CHAR, glue: bool = False
) -> str:
    """``prefix`` (fixed width) where it starts a token, not the inside of a longer one.

    A prefixed token must not be glued to more token characters, or a
    substring of a longer identifier or base64 blob would be redacted. Glue
    that cannot belong to a token does not count: a percent-encoded byte
    (access_token%3Dghp_..., %20ghp_...) or an escaped line break or tab
    (JSON's "...\\nghp_..."), as base64 and base64url hold no "%" and no "\\".
    With ``word_glue``, a word joined by "_" or "-" does not count either
    (MY_TOKEN_ghp_...): a base64url blob holds "_ghp_" and 36 letters and
    digits about once in 10^9 positions. Not for three-character prefixes
    (sk-, hf_), which a blob holds a thousand times as often.

    With ``glue``, a prefix glued to any word matches as well (tokenghp_...,
    1ghp_..., abcAKIA...: SPEC 3.5), in an empty group named ``glued...``, for
    the rule's ``glue`` check to judge; that check stands in for the boundary.

    The look-behinds follow the prefix instead of preceding it: a pattern that
    starts with a literal is searched for that literal, some thirty times
    faster than trying a look-behind at every position of the body.
    """
    allowed = [
        rf"(?<!{token_char}{prefix})",
        rf"(?<=%[0-9A-Fa-f]{{2}}{prefix})",
        rf"(?<=\\[nrt]{prefix})",
    ]
    if word_glue:
        allowed.append(rf"(?<=[A-Za-z0-9][_-]{prefix})")
    if glue:
        allowed.append(f"(?P<glued{next(_GLUE_GROUPS)}>)")
    return prefix + "(?:" + "|".join(allowed) + ")"


_E = r"(?![A-Za-z0-9_-])"

# A bare (unquoted) value stops at whitespace and at characters that end a
# value in code, URLs and shell. A closing bracket or a separator among them
# (& ; , ) ] }) only ends it if what follows does too, or starts the next
# field (&user=, ;Database=): DB_PASSWORD=Tr0ub4dor&3 is one value, and no
# tail of it may be left behind.
_BARE_CHARS = r"[^\s\"'`,;&(){}\[\]<>]"
_BARE = _BARE_CHARS + r"++(?:[&;,)\]}](?![\w.-]*+[=:])" + _BARE_CHARS + r"++)*+"

# Quoted values keep their quotes outside the redaction.
_VALUE = (
    r"(?:\"(?P<secret_dq>[^\"\n]*+)\""
    r"|'(?P<secret_sq>[^'\n]*+)'"
    r"|\\\"(?P<secret_esc>[^\"\\\n]*+)\\\""
    r"|(?P<secret_bare>" + _BARE + r"))"
)

_PASSWORD_WORDS = r"passw(?:or)?d|passphrase|pwd|(?<=[_.-])pass"
_SECRET_WORDS = (
    r"(?:api|secret|access|private|signing|encryption|master|auth|client|app)[_.-]?key"
    r"|apikey|secret|token|sessionid"
)
# Every word above ends with one of these (lower case, for folded anchors).
_PASSWORD_ENDINGS = (r"pass(?:w(?:or)?d|phrase)?", r"pwd")
_SECRET_ENDINGS = (r"key", r"secret", r"token", r"sessionid")
_PASSWORD_FLAG_WORDS = r"passw(?:or)?d|pass"
_SECRET_FLAG_WORDS = r"(?:api|secret|access|client)-key|apikey|client-secret|secret|token"


def _assignment(words: str) -> re.Pattern[str]:
    # The key only has to end with a secret word (DB_PASSWORD, clientSecret,
    # "access_token"); it must be followed directly by an assignment operator,
    # which rules out password_hash, max_tokens and tokenizer.
    return re.compile(
        r"(?P<kw>(?i:" + words + r"))"
        # Closing quote of a quoted key ("password": ...), a subscript
        # (config["SECRET_KEY"] = ...), markdown bold (**Password:** ...).
        r"(?P<kq>\\?[\"']\]?)?(?:\*\*|__)?"
        r"(?:"
        # Annotated: password: str = "...", token: Optional[str] = "..."
        r"[ \t]*:[ \t]*[A-Za-z_][\w.\[\], |]{0,60}?=(?![=>])"
        # key = v, key: v, key := v, key => v (not ==, not ::, not ://), and
        # a percent-encoded "=" (a URL inside a query string: token%3D...)
        r"|(?P<op>[ \t]*(?::=|=>|=(?!=)|:(?![:/])|%3[Dd])[ \t]*)"
        r")"
        r"[ \t]*(?:\*\*|__)?[ \t]*" + _VALUE
    )


def _assignment_anchors(endings: tuple[str, ...]) -> tuple[str, ...]:
    # The key's last word, its closing quote and bold marker as in _assignment(),
    # then the start every operator shares: blanks and ":", "=" or "%3d".
    return tuple(ending + r"(?:\\?[\"']\]?)?(?:\*\*|__)?[ \t]*(?:[:=]|%3d)" for ending in endings)


def _flag(words: str) -> re.Pattern[str]:
    # Command-line flags with a space: --password VALUE, --db-password VALUE.
    # (--password=VALUE is an assignment.) --password-stdin and --max-tokens
    # do not match: the secret word must end the flag name.
    return re.compile(
        r"(?i:(?<![\w-])--(?:[a-z0-9]+-)*(?:" + words + r"))[ \t]+"
        r"(?:\"(?P<secret_dq>[^\"\n]*+)\"|'(?P<secret_sq>[^'\n]*+)'"
        r"|(?P<secret_bare>" + _BARE + r"))"
    )


def _flag_anchor(words: str) -> str:
    # _flag()'s flag name without the look-behind, and the first blank after it.
    return r"--(?:[a-z0-9]+-)*(?:" + words + r")[ \t]"


def _xml(words: str) -> re.Pattern[str]:
    # XML elements (Maven settings.xml, .NET configs): <password>x</password>.
    return re.compile(
        r"<(?P<tag>(?i:[A-Za-z_:.-]{0,40}?(?:" + words + r")))>"
        r"(?P<secret>[^<\s]++)</(?P=tag)>"
    )


def _xml_anchors(endings: tuple[str, ...]) -> tuple[str, ...]:
    # The tag name's last word and the ">" that closes the opening tag.
    return tuple(ending + ">" for ending in endings)


# SQL's WITH PASSWORD 'x' and IDENTIFIED BY 'x', .netrc's "login NAME password X".
_SQL_NETRC_PASSWORD = re.compile(
    r"(?i:\bwith[ \t]+(?:encrypted[ \t]+)?password|\bidentified[ \t]+by"
    r"|\blogin[ \t]+[^\s]++[ \t]+password)[ \t]+"
    r"(?:\"(?P<secret_dq>[^\"\n]*+)\"|'(?P<secret_sq>[^'\n]*+)'"
    r"|(?P<secret_bare>" + _BARE + r"))"
)

# sshpass -p PASSWORD ssh ...; flags without a value (-v) may come first.
# The look-behind follows the literal, so the search skips to each "sshpass".
_SSHPASS = re.compile(
    r"sshpass(?<![\w-]sshpass)(?:[ \t]++-(?!p)[^\s-]\S*+)*+[ \t]++-p[ \t]*+"
    r"(?:\"(?P<secret_dq>[^\"\n]*+)\"|'(?P<secret_sq>[^'\n]*+)'"
    r"|(?P<secret_bare>" + _BARE + r"))"
)

_NL = r"(?:\r?\n|\\r?\\n)"
_PEM_BEGIN = r"-----BEGIN[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----"
_PEM_END = r"-----END[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----"
_GITLAB_PREFIX = r"gl(?:pat|dt|ptt|rt|oas|cbt|imt|ft|agent|soat|ffct|wt)-"
_SLACK_PREFIX = r"xox[abposre]-"
_AWS_KEY_ID_PREFIX = r"(?:AKIA|ASIA|ABIA|ACCA)"
# plumb_key_ or plumb_tok_, 8 characters, "_", and 43 of base64url.
_PLUMB_CREDENTIAL_LENGTH = 10 + 8 + 1 + 43
# Authorization header name up to its separator, as basic_auth and bearer_token
# spell it (after the optional "proxy-").
_AUTHORIZATION_ANCHOR = r"authorization(?:\\?[\"'])?[ \t]*[:=]"

# Earlier rules win overlaps: prefixed formats first (the most specific, and
# anthropic's sk-ant- before the generic sk-), then JWTs, then the rules that
# recognise a secret only by its context.
RULES: tuple[Rule, ...] = (
    # PEM private keys (RSA, EC, DSA, OPENSSH, ENCRYPTED, PGP ... BLOCK), also
    # with JSON-escaped \n. The whole block goes. A key pasted without its END
    # line loses its BEGIN line and every following line of base64 or PEM
    # header, so no line of the body survives.
    Rule(
        "private_key",
        re.compile(
            _PEM_BEGIN
            + r"(?:(?:[^-]|-(?!----))*+"
            + _PEM_END
            + r"|(?:"
            + _NL
            + r"(?:[A-Za-z0-9+/=]++"
            r"|(?:Proc-Type|DEK-Info|Version|Comment|Hash|Charset):[^\r\n\\]*+)"
            r"(?=" + _NL + r"|\Z|[\"']))*+)"
        ),
        refine_keep,
        anchors=(r"-----BEGIN",),
    ),
    # plumb project key: plumb_key_ + 8 [a-z0-9] + _ + 43 base64url.
    Rule(
        "plumb_project_key",
        re.compile(_token_start("plumb_key_", glue=True) + r"[a-z0-9]{8}_[A-Za-z0-9_-]{32,}+"),
        anchors=(r"plumb_key_",),
        wraps=True,
        full_length=_PLUMB_CREDENTIAL_LENGTH,
        glue=glue_any,
        prefix="plumb_key_",
    ),
    # plumb session token: plumb_tok_ + 8 [a-z0-9] + _ + 43 base64url.
    Rule(
        "plumb_session_token",
        re.compile(_token_start("plumb_tok_", glue=True) + r"[a-z0-9]{8}_[A-Za-z0-9_-]{32,}+"),
        anchors=(r"plumb_tok_",),
        wraps=True,
        full_length=_PLUMB_CREDENTIAL_LENGTH,
        glue=glue_any,
        prefix="plumb_tok_",
    ),
    # Anthropic: sk-ant-api03-..., sk-ant-admin01-..., sk-ant-sid01-...
    Rule(
        "anthropic_key",
        re.compile(_token_start("sk-ant-", glue=True) + r"[A-Za-z0-9_-]{20,}+"),
        anchors=(r"sk-ant-",),
        wraps=True,
        glue=glue_random,
        prefix="sk-ant-",
    ),
    # OpenAI: legacy sk- + 48 alnum, sk-proj-..., sk-svcacct-..., sk-admin-...
    Rule(
        "openai_key",
        re.compile(_token_start("sk-", word_glue=False) + r"(?!ant-)[A-Za-z0-9_-]{20,}+"),
        refine_mixed_case,
        anchors=(r"sk-",),
        wraps=True,
        prefix="sk-",
        prefix_in_bodies=True,
    ),
    # GitHub classic: ghp_ (personal), gho_ (OAuth), ghu_ (user-to-server),
    # ghs_ (server-to-server), ghr_ (refresh) + 36 alnum.
    Rule(
        "github_token",
        re.compile(_token_start("gh[pousr]_", glue=True) + r"[A-Za-z0-9]{36,}+"),
        anchors=(r"gh[pousr]_",),
        wraps=True,
        # Words end in "ghs" ("laughs_totalCountForTheCurrentUserSession").
        glue=glue_random,
        prefix="gh[pousr]_",
    ),
    # GitHub fine-grained PATs: github_pat_ + 22 alnum + _ + 59 alnum.
    Rule(
        "github_token",
        re.compile(_token_start("github_pat_", glue=True) + r"[A-Za-z0-9_]{50,}+"),
        anchors=(r"github_pat_",),
        wraps=True,
        full_length=93,
        glue=glue_any,
        prefix="github_pat_",
    ),
    # GitLab: glpat- (personal/project/group), gldt- (deploy), glptt-
    # (pipeline trigger), glrt- (runner), gloas- (OAuth secret), glcbt- (CI
    # job), glimt- (incoming mail), glft- (feed), glagent- (agent), glsoat-
    # (SCIM), glffct- (feature flags), glwt- (workspace); newer routable
    # tokens carry .01.xxxx suffixes; GR1348941 legacy runner registration.
    Rule(
        "gitlab_token",
        re.compile(
            _token_start("gl", glue=True)
            + _GITLAB_PREFIX[2:]
            + r"[A-Za-z0-9_-]{20,}+(?:\.[A-Za-z0-9_-]++)*+|"
            + _token_start("GR1348941", glue=True)
            + r"[A-Za-z0-9_-]{20,}+"
        ),
        anchors=(_GITLAB_PREFIX, r"GR1348941"),
        wraps=True,
        glue=glue_any,
        prefix=_GITLAB_PREFIX + "|GR1348941",
    ),
    # Slack: xoxb- (bot), xoxp- (user), xoxa-/xoxr- (app/refresh), xoxs-,
    # xoxo-, xoxe-; xapp-1-... app-level tokens; incoming webhook URLs, which
    # are a credential in full, so the whole URL is redacted.
    Rule(
        "slack_token",
        re.compile(
            _token_start(_SLACK_PREFIX, glue=True)
            + r"[A-Za-z0-9-]{10,}+|"
            + _token_start("xapp-", glue=True)
            + r"[0-9]+-[A-Za-z0-9-]{10,}+"
            r"|https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/-]{10,}+"
        ),
        anchors=(_SLACK_PREFIX, r"xapp-", r"hooks\.slack\.com/"),
        wraps=True,
        # "hugsxoxo-see-you-at-the-station" is a sign-off, not a token.
        glue=glue_random,
        prefix=_SLACK_PREFIX + "|xapp-",
    ),
    # Stripe secret (sk_live_/sk_test_) and restricted (rk_live_/rk_test_)
    # keys, and webhook signing secrets (whsec_). Publishable pk_ keys are
    # public by design and are left alone.
    Rule(
        "stripe_key",
        re.compile(
            r"(?:"
            + _token_start("[sr]k_(?:live|test)_", token_char="[A-Za-z0-9_]", glue=True)
            + r"[A-Za-z0-9]{20,}+|"
            + _token_start("whsec_", token_char="[A-Za-z0-9_]", glue=True)
            + r"[A-Za-z0-9]{32,}+)"
            + _E
        ),
        anchors=(r"k_(?:live|test)_", r"whsec_"),
        wraps=True,
        # Test names glue words to "sk_test_" ("task_test_handlesEmptyQueueGracefully").
        glue=glue_random,
        prefix=r"[sr]k_(?:live|test)_|whsec_",
    ),
    # Google API key: AIza + 35 base64url.
    Rule(
        "google_api_key",
        re.compile(_token_start("AIza", glue=True) + r"[A-Za-z0-9_-]{35}" + _E),
        anchors=(r"AIza",),
        wraps=True,
        glue=glue_any,
        prefix="AIza",
    ),
    # Google OAuth 2.0 access token: ya29. + base64url, ya29.c. for service
    # accounts; it is a bearer credential for an hour, whatever header it is in.
    Rule(
        "google_oauth_token",
        re.compile(
            _token_start(r"ya29\.", glue=True) + r"(?:[A-Za-z0-9_-]++\.)?[A-Za-z0-9_-]{20,}+"
        ),
        anchors=(r"ya29\.",),
        wraps=True,
        glue=glue_any,
        prefix=r"ya29\.",
    ),
    # npm access token: npm_ + 36 alnum.
    Rule(
        "npm_token",
        re.compile(_token_start("npm_", glue=True) + r"[A-Za-z0-9]{36}" + _E),
        anchors=(r"npm_",),
        wraps=True,
        # "pnpm_" starts names too.
        glue=glue_random,
        prefix="npm_",
    ),
    # PyPI API token: pypi- + a macaroon, base64 starting AgE (AgEIcHlwaS5vcmc
    # for pypi.org, AgENdGVzdC5weXBpLm9yZw for TestPyPI).
    Rule(
        "pypi_token",
        re.compile(_token_start("pypi-AgE", glue=True) + r"[A-Za-z0-9_-]{50,}+"),
        anchors=(r"pypi-AgE",),
        wraps=True,
        glue=glue_any,
        prefix="pypi-AgE",
    ),
    # Hugging Face user access token: hf_ + 34 letters.
    Rule(
        "huggingface_token",
        re.compile(_token_start("hf_", word_glue=False) + r"[A-Za-z0-9]{34,}+" + _E),
        anchors=(r"hf_",),
        wraps=True,
        prefix="hf_",
        prefix_in_bodies=True,
    ),
    # SendGrid API key: SG. + 22 + . + 43 base64url.
    Rule(
        "sendgrid_key",
        re.compile(_token_start(r"SG\.") + r"[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}" + _E),
        anchors=(r"SG\.",),
        wraps=True,
        prefix=r"SG\.",
    ),
    # Twilio API key SID: SK + 32 lower-case hex digits.
    Rule(
        "twilio_api_key",
        re.compile(_token_start("SK", word_glue=False) + r"[0-9a-f]{32}" + _E),
        # The whole token: "SK" alone starts too many words to be worth a search.
        anchors=(r"SK[0-9a-f]{32}",),
        prefix=r"SK[0-9a-f]{32}",
    ),
    # AWS access key id: AKIA (long-term), ASIA (STS), ABIA, ACCA + 16 upper alnum.
    Rule(
        "aws_access_key_id",
        re.compile(
            _token_start(_AWS_KEY_ID_PREFIX, word_glue=False, token_char="[A-Za-z0-9]", glue=True)
            + r"[A-Z0-9]{16}(?![A-Za-z0-9])"
        ),
        anchors=(_AWS_KEY_ID_PREFIX,),
        wraps=True,
        # Not glue_random: ids are base32, and one in 30 has no digit.
        glue=glue_any,
        prefix=_AWS_KEY_ID_PREFIX,
    ),
    # JWT (JWS compact form): base64url header starting eyJ ({"), payload and
    # signature, dot-separated. A single eyJ... segment is plain base64 JSON.
    Rule(
        "jwt",
        re.compile(
            _token_start("eyJ", glue=True)
            + r"[A-Za-z0-9_-]{5,}+\.[A-Za-z0-9_-]{5,}+\.[A-Za-z0-9_-]{10,}+"
        ),
        anchors=(r"eyJ",),
        wraps=True,
        # Dotted names hold "eyJ" too: hockeyJersey.number.displayValue.
        glue=glue_jwt,
        prefix="eyJ",
    ),
    # AWS secret access key: 40 base64 characters, recognised only in an
    # assignment (aws_secret_access_key = ..., AWS_SECRET_ACCESS_KEY: ...,
    # "SecretAccessKey": "..."), since 40 base64 characters alone could be anything.
    Rule(
        "aws_secret_access_key",
        re.compile(
            r"(?i:(?<![A-Za-z0-9])(?:aws[_.-]?secret(?:[_.-]?access)?[_.-]?key"
            r"|secret[_.-]?access[_.-]?key))"
            r"(?:\\?[\"'])?[ \t]*(?::=|=>|=|:)[ \t]*(?:\\?[\"'])?"
            r"(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
        ),
        # Both key spellings end in secret[_access]_key; then the operator.
        folded_anchors=(r"secret(?:[_.-]?access)?[_.-]?key(?:\\?[\"'])?[ \t]*[:=]",),
    ),
    # The same key without its name, pasted next to its key id: aws configure's
    # prompts, the console's CSV, "AKIA...:secret". It is the first run of
    # exactly 40 base64 characters after the id, on its line or the next, that
    # mixes both cases with a digit, "/" or "+" (a git SHA does not); its own
    # line first. Bounded gaps keep the search after each id short.
    Rule(
        "aws_secret_access_key",
        re.compile(
            _AWS_KEY_ID_PREFIX + r"[A-Z0-9]{16}(?![A-Za-z0-9])"
            r"(?:[^\r\n]{0,100}?\r?\n)??[^\r\n]{0,100}?(?<![A-Za-z0-9/+])"
            r"(?P<secret>(?=[A-Za-z0-9/+]{0,39}?[A-Z])(?=[A-Za-z0-9/+]{0,39}?[a-z])"
            r"(?=[A-Za-z]{0,39}[0-9/+])[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
        ),
        anchors=(_AWS_KEY_ID_PREFIX,),
    ),
    # Azure storage account key (AccountKey=... in a connection string,
    # AZURE_STORAGE_ACCOUNT_KEY, --account-key): 64 bytes of base64. Only a
    # long base64 value counts, not a placeholder or a reference.
    Rule(
        "azure_storage_key",
        re.compile(
            r"(?i:account[_.-]?key)(?:\\?[\"'])?(?:[ \t]*(?::=|=>|=|:)|[ \t])[ \t]*(?:\\?[\"'])?"
            r"(?P<secret>[A-Za-z0-9+/]{40,}+={0,2})(?![A-Za-z0-9+/=])"
        ),
        folded_anchors=(r"account[_.-]?key(?:\\?[\"'])?[ \t]*[:= \t]",),
    ),
    # scheme://user:password@host: only the password is redacted, the user
    # and host stay readable. The password runs to the last @ of the authority,
    # as URL parsers read it, so an unescaped @ in it does not leak the rest.
    Rule(
        "url_credentials",
        re.compile(
            r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{0,30}://[^\s:/?#@\"'<>\[\]]*+:"
            r"(?P<secret>[^\s/?#\"'<>]+)@(?=[A-Za-z0-9\[])"
        ),
        refine_url_password,
        # The pattern from "://" on, without its look-ahead: links without a
        # password (https://host/path) do not reach the full scan.
        anchors=(r"://[^\s:/?#@\"'<>\[\]]*+:[^\s/?#\"'<>]+@",),
    ),
    # HTTP Basic credentials: Authorization: Basic base64(user:password), and
    # curl -u user:password (password only).
    Rule(
        "basic_auth",
        re.compile(
            r"(?i:(?<![A-Za-z0-9_-])(?:proxy-)?authorization(?:\\?[\"'])?[ \t]*[:=][ \t]*"
            r"(?:\\?[\"'])?[ \t]*basic[ \t]+)(?P<secret>[A-Za-z0-9+/]{8,}+={0,2})"
        ),
        refine_basic,
        folded_anchors=(_AUTHORIZATION_ANCHOR,),
    ),
    Rule(
        "basic_auth",
        re.compile(r"(?<!\S)(?:-u|--user)(?:[ \t]+|=)[\"']?[^\s:\"'$]++:(?P<secret>[^\s\"']++)"),
        refine_curl_user,
        anchors=(r"-u[ \t=]", r"--user[ \t=]"),
    ),
    # Authorization: Bearer <token> (also Token/Bot/ApiKey schemes, and a bare
    # "Bearer <token>" as in curl -H or a log line): the header name and scheme
    # stay, the value goes.
    Rule(
        "bearer_token",
        re.compile(
            r"(?i:(?<![A-Za-z0-9_-])(?:(?P<auth>(?:proxy-)?authorization)(?:\\?[\"'])?[ \t]*[:=]"
            r"[ \t]*(?:\\?[\"'])?[ \t]*(?:(?P<scheme>bearer|token|bot|apikey|api-key|key)[ \t]+)?"
            r"|bearer[ \t]+))"
            r"(?P<secret>[A-Za-z0-9._~+/-]++=*+)"
        ),
        refine_bearer,
        folded_anchors=(_AUTHORIZATION_ANCHOR, r"bearer[ \t]"),
    ),
    # Generic assignments in code, env files, YAML, JSON, headers and query
    # strings: password=..., DB_PASSWORD: ..., "passwd": "...". Value only.
    Rule(
        "password_assignment",
        _assignment(_PASSWORD_WORDS),
        refine_password_assignment,
        folded_anchors=_assignment_anchors(_PASSWORD_ENDINGS),
    ),
    Rule(
        "password_assignment",
        _flag(_PASSWORD_FLAG_WORDS),
        refine_password_flag,
        folded_anchors=(_flag_anchor(_PASSWORD_FLAG_WORDS),),
    ),
    Rule(
        "password_assignment",
        _SQL_NETRC_PASSWORD,
        refine_password_flag,
        folded_anchors=(r"password[ \t]", r"identified[ \t]+by[ \t]"),
    ),
    Rule(
        "password_assignment",
        _xml(_PASSWORD_WORDS),
        refine_literal,
        folded_anchors=_xml_anchors(_PASSWORD_ENDINGS),
    ),
    # mysql -uroot -pS3cret (the password glued to -p).
    Rule(
        "password_assignment",
        re.compile(r"(?<!\S)-p(?P<secret>[^\s\"'`;&|]++)"),
        refine_mysql_password,
        # (?<!\S)-p with the look-behind moved after the literal (it then
        # looks at the character before "-p"), so the search skips from one
        # "-p" to the next instead of trying every position.
        anchors=(r"-p(?<!\S-p)",),
    ),
    # sshpass -p VALUE, sshpass -pVALUE: the password on the command line.
    Rule(
        "password_assignment",
        _SSHPASS,
        refine_sshpass,
        anchors=(r"sshpass[ \t]",),
    ),
    # The same for api_key=, client_secret:, SECRET_KEY=, access_token=, ...
    Rule(
        "secret_assignment",
        _assignment(_SECRET_WORDS),
        refine_assignment,
        folded_anchors=_assignment_anchors(_SECRET_ENDINGS),
    ),
    Rule(
        "secret_assignment",
        _flag(_SECRET_FLAG_WORDS),
        refine_flag,
        folded_anchors=(_flag_anchor(_SECRET_FLAG_WORDS),),
    ),
    Rule(
        "secret_assignment",
        _xml(_SECRET_WORDS),
        refine_literal,
        folded_anchors=_xml_anchors(_SECRET_ENDINGS),
    ),
)
