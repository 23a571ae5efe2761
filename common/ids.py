"""Opaque public identifiers: a readable type prefix and 20 random base32 characters.

Integer primary keys stay internal (they are cheap to index and order by);
everything an API client sees is one of these, so ids reveal neither counts
nor creation order and cannot be guessed across projects.
"""

import base64
import secrets


def new_public_id(prefix: str) -> str:
    random_part = base64.b32encode(secrets.token_bytes(15)).decode("ascii").lower()
    return f"{prefix}_{random_part}"
