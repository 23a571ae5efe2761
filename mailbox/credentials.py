"""Project keys and session tokens: how they look, how they are stored and checked.

A credential is ``plumb_<kind>_<prefix>_<secret>``. The prefix is not secret:
it is stored in clear to find the row and to name a key in listings and
revocations. Only a SHA-256 digest of the whole credential is stored; the
secret part carries 256 bits of randomness, so a fast hash is enough (a slow
password hash protects low-entropy human passwords, which these are not).
Digests are compared with ``hmac.compare_digest`` so the check takes the
same time wherever the first differing byte is.
"""

import hashlib
import hmac
import re
import secrets
import string
from dataclasses import dataclass

PROJECT_KEY = "key"
SESSION_TOKEN = "tok"

_PREFIX_ALPHABET = string.ascii_lowercase + string.digits
CREDENTIAL_RE = re.compile(r"^plumb_(key|tok)_([a-z0-9]{8})_([A-Za-z0-9_-]{43})$")


@dataclass(frozen=True)
class NewCredential:
    raw: str
    prefix: str
    digest: str


@dataclass(frozen=True)
class ParsedCredential:
    kind: str
    prefix: str
    raw: str


def digest(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def generate(kind: str) -> NewCredential:
    prefix = "".join(secrets.choice(_PREFIX_ALPHABET) for _ in range(8))
    raw = f"plumb_{kind}_{prefix}_{secrets.token_urlsafe(32)}"
    return NewCredential(raw=raw, prefix=prefix, digest=digest(raw))


def parse(raw: str) -> ParsedCredential | None:
    match = CREDENTIAL_RE.match(raw)
    if match is None:
        return None
    return ParsedCredential(kind=match.group(1), prefix=match.group(2), raw=raw)


def matches(raw: str, stored_digest: str) -> bool:
    return hmac.compare_digest(digest(raw), stored_digest)
