"""Whether a pattern's match is a real secret, and which part of it to redact.

A rule's pattern finds candidates; the functions here narrow the span to the
secret itself, or veto a match that is a reference, a type, a placeholder or a
documentation dummy rather than a literal credential (SPEC 3.5: false
positives are bugs too).
"""

from __future__ import annotations

import base64
import binascii
import json
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
    # What status lines say about a password ("Password: unchanged").
    "disabled", "enabled", "encrypted", "generated", "hashed", "omitted", "provided",
    "unchanged", "unknown",
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
# A bearer value that has to look random (after a bare "Bearer", or inside a
# sentence) has to be this long too.
_MIN_TOKEN_LENGTH = 8
# A quoted password with spaces is a passphrase only if it does not read as a
# sentence; these are the small words of messages and labels (not "my": "my
# pass phrase"), and at most this many words.
# fmt: off
_PROSE_WORDS = frozenset({
    "a", "an", "are", "at", "be", "been", "can", "can't", "cannot", "characters", "could",
    "empty", "enter", "field", "for", "from", "incorrect", "invalid", "is", "it", "its",
    "least", "missing", "must", "not", "of", "please", "required", "should", "that", "the",
    "these", "this", "those", "too", "was", "were", "will", "would", "wrong", "you", "your",
})
# fmt: on
_PASSPHRASE_MAX_WORDS = 8
_SENTENCE_ENDINGS = (".", ":", "?", "\u2026")
_FORMAT_RE = re.compile(r"%[-+ #0-9.]*[sdifr]|\{\w*\}")
# Words that follow "Authorization: Bearer" in prose about the header.
# fmt: off
_AUTH_PROSE_WORDS = frozenset({
    "auth", "authentication", "authorization", "credential", "credentials", "format", "header",
    "headers", "prefix", "scheme", "schemes", "tokens",
})
# fmt: on
# What may precede a key at the start of its line (indentation, list and quote
# markup, bold); what may follow a value that ends its line (a comment may);
# what may follow a header's value that ends the header (a closing quote, an
# escaped line break).
_LINE_LEAD_RE = re.compile(r"[ \t>*#\-\"']*+")
_LINE_END_RE = re.compile(r"[ \t]*+(?:[\r\n#]|\Z)")
_HEADER_END_RE = re.compile(r"[ \t]*+(?:[\r\n\"'`\\]|\Z)")
# What follows the password of "sshpass -p PASSWORD" on a command line: the
# command sshpass runs, one of its flags, or the end of the line.
_SSHPASS_COMMAND_RE = re.compile(
    r"[ \t]*+(?:[\r\n;&|]|\Z)|[ \t]++(?:-|(?:ssh|scp|sftp|rsync|ssh-copy-id|git|ansible\S*+)(?!\S))"
)
# What may follow a token that was glued to a word in front: no more of a token.
_CLEAR_BEHIND_RE = re.compile(r"(?![A-Za-z0-9_-])")
# An encoded "&" or blank ends a percent-encoded value.
_ENCODED_SEPARATOR_RE = re.compile(r"%(?:26|20|2[Cc]|3[Bb])")


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
    return value.lower().strip("<>[]{}()'\"`") in _PLACEHOLDER_WORDS or _is_template(value)


def _is_template(value: str) -> bool:
    """Whether a value is a placeholder by its form (``<token>``, ``${PW}``, ``xxxx``, ``PW``).

    Unlike ``_is_placeholder`` this does not look at words: where the context
    already says "this is a password" (``user:pass@host``), a word is one.
    """
    if not value:
        return True
    lowered = value.lower()
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


def _is_passphrase(value: str) -> bool:
    """Whether a quoted value with spaces is a passphrase rather than a message.

    ``password: "correct horse battery staple"`` is a secret, but the same
    place holds validation messages and labels (``"This field is required."``,
    ``"must be at least 12 characters"``, ``"Enter your password"``). Those are
    sentences: they end with a full stop, name the secret, or use the small
    words of prose, which a passphrase of random words seldom holds.
    """
    words = [word.strip(",;!").lower() for word in value.split()]
    if len(words) > _PASSPHRASE_MAX_WORDS or value.rstrip()[-1:] in _SENTENCE_ENDINGS:
        return False
    if _SECRET_WORD_RE.search(value) or _FORMAT_RE.search(value):
        return False
    return not any(word in _PROSE_WORDS for word in words)


def _is_literal_secret(value: str, *, bare: bool, env_style: bool, phrases: bool = False) -> bool:
    """Whether an assigned value is a literal credential rather than code or prose.

    Quoted values are literals by construction. An unquoted value is only a
    secret when it cannot be a name: ``password = raw_password`` and
    ``token: str`` are code, ``password: s3cr3t!`` is not. In env style
    (``DB_PASSWORD=supersecret``, ``POSTGRES_PASSWORD: supersecret``: an
    upper-case key) every value is a literal, so plain words count there.
    With ``phrases``, a quoted value with spaces may be a passphrase.
    """
    if len(value) < _MIN_LITERAL_LENGTH or _is_placeholder(value):
        return False
    # Syntax-highlighting themes map Token types to colours ("#d8dee9").
    if _COLOUR_RE.fullmatch(value):
        return False
    # Whitespace means prose or an error message ("Password is too short"),
    # unless a quoted password reads as a passphrase rather than a sentence.
    if any(ch.isspace() for ch in value):
        return phrases and not bare and _is_passphrase(value)
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


def _assignment(match: re.Match[str], span: Span, *, password: bool) -> Span | None:
    text = match.string
    bare = match.start("secret_bare") != -1
    operator = match.group("op")
    if bare:
        # A value followed by "(" or "[" is a call or a subscript: a reference.
        # (A marker written by an earlier pass is not a subscript.)
        following = text[span[1] : span[1] + 1]
        if following in ("(", "[", "{") and not text.startswith("[REDACTED:", span[1]):
            return None
        if operator is not None and operator.strip().lower() == "%3d":
            # Percent-encoded (access_token%3D...%26state%3D...): the value
            # ends where an encoded "&" or blank does.
            end = _ENCODED_SEPARATOR_RE.search(text, span[0], span[1])
            span = (span[0], end.start() if end else span[1])
        span = _strip_trailing_punctuation(text, span)
    key_start = match.start("kw")
    while key_start > 0 and text[key_start - 1] in _KEY_CHARS:
        key_start -= 1
    key = text[key_start : match.end("kw")]
    # DB_PASSWORD=x in a shell or .env file, POSTGRES_PASSWORD: x in a
    # docker-compose or Kubernetes env map: the value is always a literal.
    env_style = (
        operator is not None
        and (operator == "=" or operator.strip() == ":")
        and match.group("kq") is None
        and key == key.upper()
        and any(ch.isalpha() for ch in key)
    )
    # "password: correcthorsebattery" alone on its line, as YAML or a list of
    # credentials writes it: a plain word is the password there too. In code
    # (password = stored) or in a sentence (choose a password: anything) it is not.
    lone_entry = (
        password
        and bare
        and operator is not None
        and operator.strip() == ":"
        and match.group("kw").lower() in ("password", "passphrase")
        and _LINE_LEAD_RE.fullmatch(text, text.rfind("\n", 0, key_start) + 1, key_start) is not None
        and _LINE_END_RE.match(text, span[1]) is not None
    )
    value = text[span[0] : span[1]]
    if not _is_literal_secret(
        value, bare=bare, env_style=env_style or lone_entry, phrases=password
    ):
        return None
    return span


def refine_assignment(match: re.Match[str], span: Span) -> Span | None:
    """``api_key = ...``, ``SECRET_KEY: ...``: a literal, not a reference or a placeholder."""
    return _assignment(match, span, password=False)


def refine_password_assignment(match: re.Match[str], span: Span) -> Span | None:
    """As ``refine_assignment``; people choose passwords, so phrases and words count too."""
    return _assignment(match, span, password=True)


def _flag(match: re.Match[str], span: Span, *, password: bool) -> Span | None:
    text = match.string
    bare = match.start("secret_bare") != -1
    if bare:
        span = _strip_trailing_punctuation(text, span)
    value = text[span[0] : span[1]]
    # "--current-token --cut-at-cursor": the next word is another flag.
    if bare and value.startswith("-"):
        return None
    if not _is_literal_secret(value, bare=bare, env_style=False, phrases=password):
        return None
    return span


def refine_flag(match: re.Match[str], span: Span) -> Span | None:
    """``--token VALUE``: a literal, not the next flag or a placeholder."""
    return _flag(match, span, password=False)


def refine_password_flag(match: re.Match[str], span: Span) -> Span | None:
    """``--password "a pass phrase"``, ``WITH PASSWORD '...'``: phrases count too."""
    return _flag(match, span, password=True)


def refine_bearer(match: re.Match[str], span: Span) -> Span | None:
    text = match.string
    span = _strip_trailing_punctuation(text, span)
    value = text[span[0] : span[1]]
    if _is_placeholder(value) or value.lower() in _AUTH_PROSE_WORDS:
        return None
    if len(value) >= _MIN_TOKEN_LENGTH and _looks_random(value):
        return span
    # Without an Authorization header around it, "bearer" is often prose
    # ("a bearer token is..."), so the value has to look random. After the
    # header and its scheme, any value that ends the header is the
    # credential ("Authorization: Bearer abcdefghij"); prose goes on after
    # the scheme's word ("set the Authorization: Bearer header on each call")
    # or ends its sentence there.
    if (
        match.group("auth") is not None
        and match.group("scheme") is not None
        and len(value) >= _MIN_LITERAL_LENGTH
        and span[1] == match.end("secret")
        and _HEADER_END_RE.match(text, span[1]) is not None
    ):
        return span
    return None


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


def refine_sshpass(match: re.Match[str], span: Span) -> Span | None:
    """``sshpass -p VALUE``: a password, whatever it looks like, if a command follows it.

    A bare plain word is also what prose puts after the flag ("sshpass -p is
    insecure"), so it counts only where the command line goes on with the
    command sshpass runs (``ssh``, ``scp``, a flag) or ends.
    """
    text = match.string
    bare = match.start("secret_bare") != -1
    if bare:
        span = _strip_trailing_punctuation(text, span)
    value = text[span[0] : span[1]]
    if _is_placeholder(value):
        return None
    if not bare or _is_literal_secret(value, bare=True, env_style=False):
        return span
    if value.lower() in _PROSE_WORDS:
        return None
    return span if _SSHPASS_COMMAND_RE.match(text, span[1]) else None


def refine_literal(match: re.Match[str], span: Span) -> Span | None:
    value = match.string[span[0] : span[1]]
    return span if _is_literal_secret(value, bare=False, env_style=False) else None


def refine_url_password(match: re.Match[str], span: Span) -> Span | None:
    """Between ``user:`` and ``@host`` any word is the password (``user:pass@host``).

    Only templates (``<password>``, ``${PW}``, ``****``) are left alone.
    """
    value = match.string[span[0] : span[1]]
    return None if _is_template(value) else span


def glue_any(text: str, span: Span) -> bool:
    """A prefix that no word holds (plumb_key_, glpat-, AKIA...): glued in front, still a token.

    It has to stand clear behind, though: glued on both sides, it is more
    likely the inside of a longer identifier or of a base64url blob.
    """
    return _CLEAR_BEHIND_RE.match(text, span[1]) is not None


def glue_random(text: str, span: Span) -> bool:
    """A prefix that words end with (laughs_, task_test_, xoxo-): glued, it needs a digit too.

    The names and words that end in such a prefix seldom hold one. A random
    body of 36 letters and digits (GitHub, npm) lacks one about twice in a
    thousand, longer ones (Anthropic) less often, and Slack's and Stripe's
    carry digits by format.
    """
    value = text[span[0] : span[1]]
    return glue_any(text, span) and any(ch.isdigit() for ch in value)


def glue_jwt(text: str, span: Span) -> bool:
    """A JWT glued to a word: only if its header is base64url of a JSON object, as JOSE has it."""
    if not glue_any(text, span):
        return False
    header = text[span[0] : text.find(".", span[0], span[1])]
    try:
        decoded = json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))
    except (ValueError, RecursionError):
        return False
    return isinstance(decoded, dict)


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
