"""Whether a pattern's match is a real secret, and which part of it to redact.

A rule's pattern finds candidates; the functions here narrow the span to the
secret itself, or veto a match that is a reference, a type, a placeholder or a
documentation dummy rather than a literal credential (SPEC 3.5: false
positives are bugs too).
"""

from __future__ import annotations

import base64
import binascii
import re

Span = tuple[int, int]

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


def secret_span(match: re.Match[str]) -> Span:
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


def is_dummy_token(value: str) -> bool:
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


def refine_assignment(match: re.Match[str], span: Span) -> Span | None:
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


def refine_flag(match: re.Match[str], span: Span) -> Span | None:
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


def refine_bearer(match: re.Match[str], span: Span) -> Span | None:
    span = _strip_trailing_punctuation(match.string, span)
    value = match.string[span[0] : span[1]]
    # Without an Authorization header around it, "bearer" is often prose
    # ("a bearer token is..."), so the value has to look random and longer.
    min_length = 8 if match.group("auth") else 16
    if len(value) < min_length or _is_placeholder(value) or not _looks_random(value):
        return None
    return span


def refine_basic(match: re.Match[str], span: Span) -> Span | None:
    """Only redact what decodes to ``user:password``, the Basic credential format."""
    value = match.string[span[0] : span[1]]
    try:
        decoded = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    return span if b":" in decoded else None


def refine_curl_user(match: re.Match[str], span: Span) -> Span | None:
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


def refine_mysql_password(match: re.Match[str], span: Span) -> Span | None:
    """``-pSECRET`` is a password only for the MySQL clients; elsewhere -p is a port or a path."""
    if not _command_precedes(match, "mysql", "mariadb"):
        return None
    text = match.string
    return None if _is_placeholder(text[span[0] : span[1]]) else span


def refine_literal(match: re.Match[str], span: Span) -> Span | None:
    value = match.string[span[0] : span[1]]
    return span if _is_literal_secret(value, bare=False, env_style=False) else None


def refine_url_password(match: re.Match[str], span: Span) -> Span | None:
    value = match.string[span[0] : span[1]]
    return None if _is_placeholder(value) else span


def refine_keep(match: re.Match[str], span: Span) -> Span | None:
    """Key material has long runs (OpenSSH's AAAAAAAA padding): no dummy check."""
    return span


def refine_mixed_case(match: re.Match[str], span: Span) -> Span | None:
    """Random keys mix digits and both cases; ``sk-some-long-slug`` in prose does not."""
    value = match.string[span[0] : span[1]]
    if (
        any(ch.isdigit() for ch in value)
        and any(ch.isupper() for ch in value)
        and any(ch.islower() for ch in value)
    ):
        return span
    return None
