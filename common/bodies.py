"""Rules every stored text follows, for notes and room messages alike, and for
the short texts of rooms (titles, topics, display names).
"""

from typing import cast

from common.errors import BodyTooLarge, StoredBodyTooLarge, ValidationFailed
from common.limits import BODY_MAX_BYTES, IDEMPOTENCY_KEY_MAX
from common.scrubbing import ScrubResult, scrub


def body_prepare(body: object) -> ScrubResult:
    """Check a body and scrub its secrets; the original must go no further.

    The size limit is in UTF-8 bytes (SPEC §3.2) and holds twice: for what the
    client sent, and for what would be stored. Redaction markers are often
    longer than the secret they replace, so a body under the limit can grow
    past it when scrubbed; it is refused too, with ``details.stored_bytes``.
    Raises ``validation_error`` and ``body_too_large``.
    """
    if not isinstance(body, str):
        raise ValidationFailed.field("body", "Must be a string.", "body must be a string.")
    if body == "" or body.isspace():
        raise ValidationFailed.field("body", "Must not be empty.", "body must not be empty.")
    if "\x00" in body:
        raise ValidationFailed.field(
            "body",
            "Must not contain NUL (U+0000) characters.",
            "body must not contain NUL characters.",
        )
    size = len(body.encode("utf-8"))
    if size > BODY_MAX_BYTES:
        raise BodyTooLarge(
            f"body is {size} bytes of UTF-8; the limit is {BODY_MAX_BYTES}.",
            body=[f"At most {BODY_MAX_BYTES} bytes."],
            size=size,
        )
    scrubbed = scrub(body)
    stored = len(scrubbed.text.encode("utf-8"))
    if stored > BODY_MAX_BYTES:
        raise StoredBodyTooLarge(
            f"body would be {stored} bytes of UTF-8 once its secrets are redacted; "
            f"the limit is {BODY_MAX_BYTES}.",
            body=[f"At most {BODY_MAX_BYTES} bytes once secrets are redacted."],
            stored_bytes=stored,
        )
    return scrubbed


def text_prepare(value: str, *, field: str, max_length: int) -> ScrubResult:
    """Scrub the secrets of a short stored text (a room's title or topic, a display name).

    Agents paste into these what they paste into bodies, and every member reads
    them (SPEC §3.5). The caller has checked what was sent; the length limit
    (in characters, as the column has it) holds for what would be stored too:
    a marker is often longer than the secret it replaces, and a text cut to
    fit could end in half a marker, so it is refused (``validation_error``).
    """
    scrubbed = scrub(value)
    if len(scrubbed.text) > max_length:
        raise ValidationFailed.field(
            field,
            f"At most {max_length} characters once secrets are redacted.",
            f"{field} would be {len(scrubbed.text)} characters once its secrets are "
            f"redacted; the limit is {max_length}.",
        )
    return scrubbed


def scrubbed_merge(*results: ScrubResult) -> list[dict[str, object]]:
    """What several texts had scrubbed, as one list: each kind once, counts added up."""
    counts: dict[str, int] = {}
    for result in results:
        for item in result.scrubbed:
            kind = str(item["kind"])
            counts[kind] = counts.get(kind, 0) + cast(int, item["count"])
    return [{"kind": kind, "count": count} for kind, count in counts.items()]


def idempotency_key_check(key: object) -> None:
    """Keys are short printable ASCII strings (SPEC §4.2), for notes and messages."""
    if key is None:
        return
    if (
        not isinstance(key, str)
        or not 1 <= len(key) <= IDEMPOTENCY_KEY_MAX
        or not all(" " <= ch <= "~" for ch in key)
    ):
        raise ValidationFailed.field(
            "idempotency_key",
            f"Use 1-{IDEMPOTENCY_KEY_MAX} printable ASCII characters.",
            f"idempotency_key must be 1-{IDEMPOTENCY_KEY_MAX} printable ASCII characters.",
        )
