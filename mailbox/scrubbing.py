"""Redact secrets from message bodies before they are stored (SPEC 3.5).

Agents paste shell sessions, configs and logs into notes and rooms. A body is
kept for every reader of the conversation, so a credential in it would leak to
all of them, to the database and to backups. Scrubbing happens once, on the
way in, and replaces each secret with ``[REDACTED:<kind>]`` so readers still
see that something was there and what it was.

The rules below are a priority-ordered table. Every rule is matched against
the original body; a match that overlaps a span already claimed by an earlier
rule (or an existing ``[REDACTED:...]`` marker) is dropped. So the most
specific kind wins: a JWT after ``Authorization: Bearer`` is reported as
``jwt``, a GitHub token in ``password=...`` or as the password of a URL as
``github_token``. Markers are never matched and claim their span, and
scrub() repeats its pass until nothing more is found, so scrubbing is
idempotent.

False positives are bugs too: hashes, UUIDs, code and prose must survive byte
for byte. Prefixed token formats are therefore anchored on both sides, and the
context-driven rules (assignments, ``Bearer``, URL passwords) only fire on
values that look like a literal, not like a reference, a type or a placeholder.

Every rule starts at a literal (a prefix, a keyword, ``://``) or a token
boundary, and its repeats are possessive or run over a class that cannot match
what follows them, so a 16 KB body is scanned in near-linear time with no
catastrophic backtracking.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["ScrubResult", "scrub"]

Span = tuple[int, int]

_MARKER_RE = re.compile(r"\[REDACTED:[a-z0-9_]+\]")

# A prefixed token must not be glued to more token characters on either side,
# or a substring of a longer identifier or base64 blob would be redacted.
_B = r"(?<![A-Za-z0-9_-])"
_E = r"(?![A-Za-z0-9_-])"

# Values that look like assignments but are placeholders, types or literals of
# the language rather than secrets (``password=None``, ``token: string``).
# fmt: off
_PLACEHOLDER_WORDS = frozenset({
    "any", "api-key", "api_key", "apikey", "bool", "boolean", "bytes", "censored", "changeme",
    "default", "dummy", "empty", "false", "filtered", "hidden", "int", "integer", "masked",
    "nil", "none", "notset", "null", "number", "object", "optional", "pass", "passwd",
    "password", "placeholder", "redacted", "removed", "required", "sample", "secret", "str",
    "string", "tbd", "todo", "token", "true", "undefined", "unset", "value",
})
# fmt: on
_PLACEHOLDER_FRAGMENTS = ("${", "{{", "$(", "%(", "...", "\u2026", "***", "example")
_ENV_NAME_RE = re.compile(r"[A-Z][A-Z_]*")
_DOTTED_REFERENCE_RE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
_WORDS_RE = re.compile(r"_*[A-Za-z]+(?:[-_.][A-Za-z]+)*_*")
_SECRET_WORD_RE = re.compile(r"passw(?:or)?d|secret|token|api[_-]?key", re.IGNORECASE)
_DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}")
_COLOUR_RE = re.compile(r"#[0-9A-Fa-f]{3,8}")
_RUN_RE = re.compile(r"(.)\1{7}")
# How far back on its line a -u/-p flag looks for the command that owns it.
# Bounded so that a body full of flags stays linear.
_COMMAND_LOOKBACK = 1000
_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
# A full stop after an unquoted value ("set PASSWORD=abc123.") ends the sentence.
# Only "." is trimmed: "!" and "?" are common password characters, and a
# trimmed character stays readable.
_TRAILING_PUNCTUATION = "."
_MIN_LITERAL_LENGTH = 6
# A bound on scrub()'s passes that real bodies never reach (they need one, plus
# one that finds nothing); it only caps the work an adversarial body can cause.
_MAX_PASSES = 8


@dataclass(frozen=True)
class ScrubResult:
    text: str
    scrubbed: list[dict[str, object]]


@dataclass(frozen=True)
class _Rule:
    kind: str
    pattern: re.Pattern[str]
    # Narrows or vetoes the span to redact; context rules use it to tell a
    # literal secret from a reference, a type or a placeholder.
    refine: Callable[[re.Match[str], Span], Span | None] | None = None

    def span(self, match: re.Match[str]) -> Span | None:
        span = _secret_span(match)
        if self.refine is not None:
            return self.refine(match, span)
        return None if _is_dummy_token(match.string[span[0] : span[1]]) else span


def _secret_span(match: re.Match[str]) -> Span:
    """The part of a match to redact: the first ``secret*`` group that took part.

    Context rules keep their key, operator and quotes outside these groups so
    that a reader still sees ``password = "[REDACTED:...]"``.
    """
    for name in match.re.groupindex:
        if name.startswith("secret") and match.start(name) != -1:
            return match.span(name)
    return match.span()


def _is_placeholder(value: str) -> bool:
    """Whether a value is documentation rather than a credential.

    Examples and templates (``<your-token>``, ``${DB_PASSWORD}``, ``xxxx``,
    ``PASSWORD``) are what people paste when they explain a setup; redacting
    them would only hide the explanation.
    """
    if not value:
        return True
    lowered = value.lower()
    if lowered.strip("<>[]{}()'\"`") in _PLACEHOLDER_WORDS:
        return True
    if value[0] in "<[{(" and value[-1] in ">]})":
        return True
    if value[0] == "$" or (value[0] == "%" and value[-1] == "%"):
        return True
    if any(fragment in lowered for fragment in _PLACEHOLDER_FRAGMENTS):
        return True
    # "xxxx-xxxx", "XXXX1234"; one case only, as a random mixed-case token
    # holds "xxxx" or "XXXX" about once in 200,000.
    if "xxxx" in value or "XXXX" in value:
        return True
    if lowered.startswith(("your", "<your")):
        return True
    if len(set(value)) == 1:
        return True
    # An all-caps name without digits is an environment variable's name.
    return _ENV_NAME_RE.fullmatch(value) is not None


def _is_dummy_token(value: str) -> bool:
    """Whether a correctly prefixed token is a documentation dummy (``ghp_xxxx...``).

    A random token body practically never holds a run of eight equal
    characters or the word ``example`` (AKIAIOSFODNN7EXAMPLE): the odds are
    below one in a billion, so a real secret is not let through for this.
    """
    return "example" in value.lower() or _RUN_RE.search(value) is not None


def _looks_random(value: str) -> bool:
    """Whether a value after a bare ``Bearer`` or ``Authorization:`` is a token, not a word."""
    if any(ch.isdigit() for ch in value) or any(ch in "+/=~" for ch in value):
        return True
    has_upper = any(ch.isupper() for ch in value)
    has_lower = any(ch.islower() for ch in value)
    return has_upper and has_lower and len(value) >= 20


def _strip_trailing_punctuation(text: str, span: Span) -> Span:
    start, end = span
    while end > start and text[end - 1] in _TRAILING_PUNCTUATION:
        end -= 1
    return start, end


def _is_literal_secret(value: str, *, bare: bool, env_style: bool) -> bool:
    """Whether an assigned value is a literal credential rather than code or prose.

    Quoted values are literals by construction. An unquoted value is only a
    secret when it cannot be a name: ``password = raw_password`` and
    ``token: str`` are code, ``password: s3cr3t!`` is not. In env style
    (``DB_PASSWORD=supersecret``, ``POSTGRES_PASSWORD: supersecret``: an
    upper-case key) every value is a literal, so plain words count there.
    """
    if len(value) < _MIN_LITERAL_LENGTH or _is_placeholder(value):
        return False
    # Syntax-highlighting themes map Token types to colours ("#d8dee9").
    if _COLOUR_RE.fullmatch(value):
        return False
    # Whitespace means prose or an error message ("Password is too short").
    # A passphrase with spaces is the price of that rule.
    if any(ch.isspace() for ch in value):
        return False
    # Words naming a secret ("set-password", "_password_reset_token",
    # "mysecretpassword" from the postgres image's docs) are names or
    # examples, quoted or not.
    words_only = _WORDS_RE.fullmatch(value) is not None
    if words_only and _SECRET_WORD_RE.search(value):
        return False
    if not bare:
        return True
    if value[0] in "$%!&*@":
        return False
    if "://" in value or value.startswith(("/", "./", "../", "~/")):
        return False
    if _DATE_RE.match(value) or _DOTTED_REFERENCE_RE.fullmatch(value):
        return False
    return env_style or not words_only


def _refine_assignment(match: re.Match[str], span: Span) -> Span | None:
    text = match.string
    bare = match.start("secret_bare") != -1
    if bare:
        # A value followed by "(" or "[" is a call or a subscript: a reference.
        # (A marker written by an earlier pass is not a subscript.)
        following = text[span[1] : span[1] + 1]
        if following in ("(", "[", "{") and not text.startswith("[REDACTED:", span[1]):
            return None
        span = _strip_trailing_punctuation(text, span)
    key_start = match.start("kw")
    while key_start > 0 and text[key_start - 1] in _KEY_CHARS:
        key_start -= 1
    key = text[key_start : match.end("kw")]
    # DB_PASSWORD=x in a shell or .env file, POSTGRES_PASSWORD: x in a
    # docker-compose or Kubernetes env map: the value is always a literal.
    operator = match.group("op")
    env_style = (
        operator is not None
        and (operator == "=" or operator.strip() == ":")
        and match.group("kq") is None
        and key == key.upper()
        and any(ch.isalpha() for ch in key)
    )
    value = text[span[0] : span[1]]
    if not _is_literal_secret(value, bare=bare, env_style=env_style):
        return None
    return span


def _refine_flag(match: re.Match[str], span: Span) -> Span | None:
    text = match.string
    bare = match.start("secret_bare") != -1
    if bare:
        span = _strip_trailing_punctuation(text, span)
    value = text[span[0] : span[1]]
    # "--current-token --cut-at-cursor": the next word is another flag.
    if bare and value.startswith("-"):
        return None
    if not _is_literal_secret(value, bare=bare, env_style=False):
        return None
    return span


def _refine_bearer(match: re.Match[str], span: Span) -> Span | None:
    span = _strip_trailing_punctuation(match.string, span)
    value = match.string[span[0] : span[1]]
    # Without an Authorization header around it, "bearer" is often prose
    # ("a bearer token is..."), so the value has to look random and longer.
    min_length = 8 if match.group("auth") else 16
    if len(value) < min_length or _is_placeholder(value) or not _looks_random(value):
        return None
    return span


def _refine_basic(match: re.Match[str], span: Span) -> Span | None:
    """Only redact what decodes to ``user:password``, the Basic credential format."""
    value = match.string[span[0] : span[1]]
    try:
        decoded = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    return span if b":" in decoded else None


def _refine_curl_user(match: re.Match[str], span: Span) -> Span | None:
    """``-u user:pass`` is a credential only for curl; ``docker run -u 1000:1000`` is not."""
    if not _command_precedes(match, "curl"):
        return None
    text = match.string
    if _is_placeholder(text[span[0] : span[1]]):
        return None
    return span


def _command_precedes(match: re.Match[str], *commands: str) -> bool:
    text = match.string
    window = max(0, match.start() - _COMMAND_LOOKBACK)
    line_start = text.rfind("\n", window, match.start()) + 1
    start = max(window, line_start)
    return any(text.find(command, start, match.start()) != -1 for command in commands)


def _refine_mysql_password(match: re.Match[str], span: Span) -> Span | None:
    """``-pSECRET`` is a password only for the MySQL clients; elsewhere -p is a port or a path."""
    if not _command_precedes(match, "mysql", "mariadb"):
        return None
    text = match.string
    return None if _is_placeholder(text[span[0] : span[1]]) else span


def _refine_literal(match: re.Match[str], span: Span) -> Span | None:
    value = match.string[span[0] : span[1]]
    return span if _is_literal_secret(value, bare=False, env_style=False) else None


def _refine_url_password(match: re.Match[str], span: Span) -> Span | None:
    value = match.string[span[0] : span[1]]
    return None if _is_placeholder(value) else span


def _refine_keep(match: re.Match[str], span: Span) -> Span | None:
    """Key material has long runs (OpenSSH's AAAAAAAA padding): no dummy check."""
    return span


def _refine_mixed_case(match: re.Match[str], span: Span) -> Span | None:
    """Random keys mix digits and both cases; ``sk-some-long-slug`` in prose does not."""
    value = match.string[span[0] : span[1]]
    if (
        any(ch.isdigit() for ch in value)
        and any(ch.isupper() for ch in value)
        and any(ch.islower() for ch in value)
    ):
        return span
    return None


# Quoted values keep their quotes outside the redaction. The bare form stops at
# whitespace and at characters that end a value in code, URLs and shell.
_VALUE = (
    r"(?:\"(?P<secret_dq>[^\"\n]*+)\""
    r"|'(?P<secret_sq>[^'\n]*+)'"
    r"|\\\"(?P<secret_esc>[^\"\\\n]*+)\\\""
    r"|(?P<secret_bare>[^\s\"'`,;&(){}\[\]<>]++))"
)

_PASSWORD_WORDS = r"passw(?:or)?d|passphrase|pwd|(?<=[_.-])pass"
_SECRET_WORDS = (
    r"(?:api|secret|access|private|signing|encryption|master|auth|client|app)[_.-]?key"
    r"|apikey|secret|token|sessionid"
)


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
        # key = v, key: v, key := v, key => v (not ==, not ::, not ://)
        r"|(?P<op>[ \t]*(?::=|=>|=(?!=)|:(?![:/]))[ \t]*)"
        r")"
        r"[ \t]*(?:\*\*|__)?[ \t]*" + _VALUE
    )


def _flag(words: str) -> re.Pattern[str]:
    # Command-line flags with a space: --password VALUE, --db-password VALUE.
    # (--password=VALUE is an assignment.) --password-stdin and --max-tokens
    # do not match: the secret word must end the flag name.
    return re.compile(
        r"(?i:(?<![\w-])--(?:[a-z0-9]+-)*(?:" + words + r"))[ \t]+"
        r"(?:\"(?P<secret_dq>[^\"\n]*+)\"|'(?P<secret_sq>[^'\n]*+)'"
        r"|(?P<secret_bare>[^\s\"'`,;&(){}\[\]<>]++))"
    )


def _xml(words: str) -> re.Pattern[str]:
    # XML elements (Maven settings.xml, .NET configs): <password>x</password>.
    return re.compile(
        r"<(?P<tag>(?i:[A-Za-z_:.-]{0,40}?(?:" + words + r")))>"
        r"(?P<secret>[^<\s]++)</(?P=tag)>"
    )


# SQL's WITH PASSWORD 'x' and IDENTIFIED BY 'x', .netrc's "login NAME password X".
_SQL_NETRC_PASSWORD = re.compile(
    r"(?i:\bwith[ \t]+(?:encrypted[ \t]+)?password|\bidentified[ \t]+by"
    r"|\blogin[ \t]+[^\s]++[ \t]+password)[ \t]+"
    r"(?:\"(?P<secret_dq>[^\"\n]*+)\"|'(?P<secret_sq>[^'\n]*+)'"
    r"|(?P<secret_bare>[^\s\"'`,;&(){}\[\]<>]++))"
)

_NL = r"(?:\r?\n|\\r?\\n)"
_PEM_BEGIN = r"-----BEGIN[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----"
_PEM_END = r"-----END[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----"

# Earlier rules win overlaps: prefixed formats first (the most specific, and
# anthropic's sk-ant- before the generic sk-), then JWTs, then the rules that
# recognise a secret only by its context.
_RULES: tuple[_Rule, ...] = (
    # PEM private keys (RSA, EC, DSA, OPENSSH, ENCRYPTED, PGP ... BLOCK), also
    # with JSON-escaped \n. The whole block goes. A key pasted without its END
    # line loses its BEGIN line and every following line of base64 or PEM
    # header, so no line of the body survives.
    _Rule(
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
        _refine_keep,
    ),
    # plumb project key: plumb_key_ + 8 [a-z0-9] + _ + 43 base64url.
    _Rule("plumb_project_key", re.compile(_B + r"plumb_key_[a-z0-9]{8}_[A-Za-z0-9_-]{32,}+")),
    # plumb session token: plumb_tok_ + 8 [a-z0-9] + _ + 43 base64url.
    _Rule("plumb_session_token", re.compile(_B + r"plumb_tok_[a-z0-9]{8}_[A-Za-z0-9_-]{32,}+")),
    # Anthropic: sk-ant-api03-..., sk-ant-admin01-..., sk-ant-sid01-...
    _Rule("anthropic_key", re.compile(_B + r"sk-ant-[A-Za-z0-9_-]{20,}+")),
    # OpenAI: legacy sk- + 48 alnum, sk-proj-..., sk-svcacct-..., sk-admin-...
    _Rule(
        "openai_key",
        re.compile(_B + r"sk-(?!ant-)[A-Za-z0-9_-]{20,}+"),
        _refine_mixed_case,
    ),
    # GitHub classic: ghp_ (personal), gho_ (OAuth), ghu_ (user-to-server),
    # ghs_ (server-to-server), ghr_ (refresh) + 36 alnum; fine-grained PATs:
    # github_pat_ + 22 alnum + _ + 59 alnum.
    _Rule(
        "github_token",
        re.compile(_B + r"(?:gh[pousr]_[A-Za-z0-9]{36,}+|github_pat_[A-Za-z0-9_]{50,}+)"),
    ),
    # GitLab: glpat- (personal/project/group), gldt- (deploy), glptt-
    # (pipeline trigger), glrt- (runner), gloas- (OAuth secret), glcbt- (CI
    # job), glimt- (incoming mail), glft- (feed), glagent- (agent), glsoat-
    # (SCIM), glffct- (feature flags), glwt- (workspace); newer routable
    # tokens carry .01.xxxx suffixes; GR1348941 legacy runner registration.
    _Rule(
        "gitlab_token",
        re.compile(
            _B + r"(?:gl(?:pat|dt|ptt|rt|oas|cbt|imt|ft|agent|soat|ffct|wt)-[A-Za-z0-9_-]{20,}+"
            r"(?:\.[A-Za-z0-9_-]++)*+|GR1348941[A-Za-z0-9_-]{20,}+)"
        ),
    ),
    # Slack: xoxb- (bot), xoxp- (user), xoxa-/xoxr- (app/refresh), xoxs-,
    # xoxo-, xoxe-; xapp-1-... app-level tokens; incoming webhook URLs, which
    # are a credential in full, so the whole URL is redacted.
    _Rule(
        "slack_token",
        re.compile(
            _B + r"(?:xox[abposre]-[A-Za-z0-9-]{10,}+|xapp-[0-9]+-[A-Za-z0-9-]{10,}+)"
            r"|https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/-]{10,}+"
        ),
    ),
    # Stripe secret (sk_live_/sk_test_) and restricted (rk_live_/rk_test_)
    # keys, and webhook signing secrets (whsec_). Publishable pk_ keys are
    # public by design and are left alone.
    _Rule(
        "stripe_key",
        re.compile(
            r"(?<![A-Za-z0-9_])(?:(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{20,}+|whsec_[A-Za-z0-9]{32,}+)"
            + _E
        ),
    ),
    # Google API key: AIza + 35 base64url.
    _Rule("google_api_key", re.compile(_B + r"AIza[A-Za-z0-9_-]{35}" + _E)),
    # npm access token: npm_ + 36 alnum.
    _Rule("npm_token", re.compile(_B + r"npm_[A-Za-z0-9]{36}" + _E)),
    # PyPI API token: pypi- + a macaroon, base64 starting AgE (AgEIcHlwaS5vcmc
    # for pypi.org, AgENdGVzdC5weXBpLm9yZw for TestPyPI).
    _Rule("pypi_token", re.compile(_B + r"pypi-AgE[A-Za-z0-9_-]{50,}+")),
    # Hugging Face user access token: hf_ + 34 letters.
    _Rule("huggingface_token", re.compile(_B + r"hf_[A-Za-z0-9]{34,}+" + _E)),
    # SendGrid API key: SG. + 22 + . + 43 base64url.
    _Rule("sendgrid_key", re.compile(_B + r"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}" + _E)),
    # AWS access key id: AKIA (long-term), ASIA (STS), ABIA, ACCA + 16 upper alnum.
    _Rule(
        "aws_access_key_id",
        re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
    ),
    # JWT (JWS compact form): base64url header starting eyJ ({"), payload and
    # signature, dot-separated. A single eyJ... segment is plain base64 JSON.
    _Rule(
        "jwt",
        re.compile(_B + r"eyJ[A-Za-z0-9_-]{5,}+\.[A-Za-z0-9_-]{5,}+\.[A-Za-z0-9_-]{10,}+"),
    ),
    # AWS secret access key: 40 base64 characters, recognised only in an
    # assignment (aws_secret_access_key = ..., AWS_SECRET_ACCESS_KEY: ...,
    # "SecretAccessKey": "..."), since 40 base64 characters alone could be anything.
    _Rule(
        "aws_secret_access_key",
        re.compile(
            r"(?i:(?<![A-Za-z0-9])(?:aws[_.-]?secret(?:[_.-]?access)?[_.-]?key"
            r"|secret[_.-]?access[_.-]?key))"
            r"(?:\\?[\"'])?[ \t]*(?::=|=>|=|:)[ \t]*(?:\\?[\"'])?"
            r"(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
        ),
    ),
    # scheme://user:password@host: only the password is redacted, the user
    # and host stay readable. The password runs to the last @ of the authority,
    # as URL parsers read it, so an unescaped @ in it does not leak the rest.
    _Rule(
        "url_credentials",
        re.compile(
            r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{0,30}://[^\s:/?#@\"'<>\[\]]*+:"
            r"(?P<secret>[^\s/?#\"'<>]+)@(?=[A-Za-z0-9\[])"
        ),
        _refine_url_password,
    ),
    # HTTP Basic credentials: Authorization: Basic base64(user:password), and
    # curl -u user:password (password only).
    _Rule(
        "basic_auth",
        re.compile(
            r"(?i:(?<![A-Za-z0-9_-])(?:proxy-)?authorization(?:\\?[\"'])?[ \t]*[:=][ \t]*"
            r"(?:\\?[\"'])?[ \t]*basic[ \t]+)(?P<secret>[A-Za-z0-9+/]{8,}+={0,2})"
        ),
        _refine_basic,
    ),
    _Rule(
        "basic_auth",
        re.compile(r"(?<!\S)(?:-u|--user)(?:[ \t]+|=)[\"']?[^\s:\"'$]++:(?P<secret>[^\s\"']++)"),
        _refine_curl_user,
    ),
    # Authorization: Bearer <token> (also Token/Bot/ApiKey schemes, and a bare
    # "Bearer <token>" as in curl -H or a log line): the header name and scheme
    # stay, the value goes.
    _Rule(
        "bearer_token",
        re.compile(
            r"(?i:(?<![A-Za-z0-9_-])(?:(?P<auth>(?:proxy-)?authorization)(?:\\?[\"'])?[ \t]*[:=]"
            r"[ \t]*(?:\\?[\"'])?[ \t]*(?:(?:bearer|token|bot|apikey|api-key|key)[ \t]+)?"
            r"|bearer[ \t]+))"
            r"(?P<secret>[A-Za-z0-9._~+/-]++=*+)"
        ),
        _refine_bearer,
    ),
    # Generic assignments in code, env files, YAML, JSON, headers and query
    # strings: password=..., DB_PASSWORD: ..., "passwd": "...". Value only.
    _Rule("password_assignment", _assignment(_PASSWORD_WORDS), _refine_assignment),
    _Rule("password_assignment", _flag(r"passw(?:or)?d|pass"), _refine_flag),
    _Rule("password_assignment", _SQL_NETRC_PASSWORD, _refine_flag),
    _Rule("password_assignment", _xml(_PASSWORD_WORDS), _refine_literal),
    # mysql -uroot -pS3cret (the password glued to -p).
    _Rule(
        "password_assignment",
        re.compile(r"(?<!\S)-p(?P<secret>[^\s\"'`;&|]++)"),
        _refine_mysql_password,
    ),
    # The same for api_key=, client_secret:, SECRET_KEY=, access_token=, ...
    _Rule("secret_assignment", _assignment(_SECRET_WORDS), _refine_assignment),
    _Rule(
        "secret_assignment",
        _flag(r"(?:api|secret|access|client)-key|apikey|client-secret|secret|token"),
        _refine_flag,
    ),
    _Rule("secret_assignment", _xml(_SECRET_WORDS), _refine_literal),
)


def _overlaps(taken: list[Span], span: Span) -> bool:
    """Whether ``span`` overlaps any span in ``taken`` (sorted, disjoint)."""
    index = bisect.bisect_left(taken, span)
    if index < len(taken) and taken[index][0] < span[1]:
        return True
    return index > 0 and taken[index - 1][1] > span[0]


def _find(text: str) -> list[tuple[int, int, str]]:
    """One pass of the rule table: disjoint ``(start, end, kind)`` spans, sorted."""
    # Markers already in the text claim their span, so a redaction is never
    # nested in or reported over another one.
    taken: list[Span] = [marker.span() for marker in _MARKER_RE.finditer(text)]
    found: list[tuple[int, int, str]] = []
    for rule in _RULES:
        for match in rule.pattern.finditer(text):
            span = rule.span(match)
            if span is None or span[0] >= span[1] or _overlaps(taken, span):
                continue
            bisect.insort(taken, span)
            found.append((span[0], span[1], rule.kind))
    found.sort()
    return found


def _replace(
    text: str, found: list[tuple[int, int, str]], written: list[tuple[int, str]]
) -> tuple[str, list[tuple[int, str]]]:
    """Write the markers for ``found`` and move the earlier markers' positions along."""
    events = sorted(
        [(start, 0, start, kind) for start, kind in written]
        + [(start, 1, end, kind) for start, end, kind in found]
    )
    parts: list[str] = []
    moved: list[tuple[int, str]] = []
    position = 0
    shift = 0
    for start, is_new, end, kind in events:
        moved.append((start + shift, kind))
        if not is_new:
            continue
        marker = f"[REDACTED:{kind}]"
        parts.append(text[position:start])
        parts.append(marker)
        position = end
        shift += len(marker) - (end - start)
    parts.append(text[position:])
    return "".join(parts), moved


def scrub(text: str) -> ScrubResult:
    """Replace each secret in ``text`` with ``[REDACTED:<kind>]``.

    ``scrubbed`` lists each kind once, in order of its first appearance, with
    how many secrets of that kind were replaced, so the sender learns what
    was removed without the value being echoed back.

    A match that loses an overlap is dropped whole, yet once the winner has
    become a marker the loser's shorter remainder may match on its own. So
    passes repeat until one finds nothing: the result is a fixed point, and
    scrubbing it again changes and reports nothing. Every productive pass
    turns at least one character that is not a marker into one, so this ends;
    in practice the second pass only confirms the first.
    """
    written: list[tuple[int, str]] = []
    for _ in range(_MAX_PASSES):
        found = _find(text)
        if not found:
            break
        text, written = _replace(text, found, written)
    counts: dict[str, int] = {}
    for _, kind in sorted(written):
        counts[kind] = counts.get(kind, 0) + 1
    return ScrubResult(
        text=text,
        scrubbed=[{"kind": kind, "count": count} for kind, count in counts.items()],
    )
