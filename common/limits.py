"""Every length limit, pattern and format plumb enforces, defined once.

Models, input serializers, the MCP tool schemas, URL patterns and services
all read them from here, so the database column, the REST field, the
published JSON Schema and the service check can never disagree.
"""

from __future__ import annotations

# --- times --------------------------------------------------------------------------
# How the API writes a time (SPEC §2: ISO 8601 UTC): DRF's DATETIME_FORMAT, and
# the form mailbox.representation.timestamp writes without strftime.
TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"

# --- names ---------------------------------------------------------------------------
NAME_MAX = 64  # slugs of projects, workspaces and rooms; agent handles

# The patterns without anchors, for URL confs; \Z, not $, anchors the full forms:
# "$" also matches before a trailing newline, letting "dev\n" through.
SLUG_CHARS = rf"[a-z0-9][a-z0-9-]{{0,{NAME_MAX - 1}}}"
HANDLE_CHARS = rf"[a-z0-9][a-z0-9._-]{{0,{NAME_MAX - 1}}}"
SLUG_PATTERN = rf"^{SLUG_CHARS}\Z"
HANDLE_PATTERN = rf"^{HANDLE_CHARS}\Z"
SLUG_MESSAGE = (
    f"Use 1-{NAME_MAX} lower-case letters, digits or '-', starting with a letter or digit."
)
HANDLE_MESSAGE = (
    f"Use 1-{NAME_MAX} lower-case letters, digits, '.', '_' or '-', "
    "starting with a letter or digit."
)

# Names no session may claim: a note to "next" goes to whoever attaches to the
# sender's workspace next (SPEC §1, §3.2), so an agent named so could never be
# reached by name; "plumb" signs plumb's own notes (a bounce notice, kind
# "system"), so no agent may pass for it.
SYSTEM_NAME = "plumb"
RESERVED_NAMES = frozenset({"next", SYSTEM_NAME})
RESERVED_NAME_MESSAGE = (
    'This name is reserved: "next" addresses the next session of a workspace, '
    'and "plumb" signs plumb\'s own notes.'
)

# Where people's handles live (SPEC §1, Person; mailbox.services.people): a
# project and workspace of their own. The project's slug fits no slug pattern,
# so no operator can create, name or take it; no key is issued for it and no
# agent starts a session in it.
PEOPLE_PROJECT = "(people)"
PEOPLE_WORKSPACE = "admin"

# Public ids (ses_..., msg_...) as clients send them back.
PUBLIC_ID_MAX = 64
PUBLIC_ID_CHARS = rf"[A-Za-z0-9_-]{{1,{PUBLIC_ID_MAX}}}"

# --- texts people write ----------------------------------------------------------------
DISPLAY_NAME_MAX = 64
ROOM_TITLE_MAX = 200
ROOM_TOPIC_MAX = 2000
PROJECT_NAME_MAX = 200
KEY_LABEL_MAX = 200
OPTIN_NOTE_MAX = 2000
# Moderation reasons, rooms and conversations alike (common.moderation).
REASON_MAX = 1000
# Who did it, as the audit trail records it (a Django username fits).
ACTOR_MAX = 150
# What an audit record keeps of its target's description.
AUDIT_TARGET_MAX = 200

# --- bodies and keys -------------------------------------------------------------------
BODY_MAX_BYTES = 16384  # UTF-8 bytes of a note, message or review (SPEC §3.2)
IDEMPOTENCY_KEY_MAX = 128  # printable ASCII characters (SPEC §4.2)
FINGERPRINT_MAX = 128
CREDENTIAL_HASH_LENGTH = 64  # hex SHA-256 of a key or token

# --- where agents reach the server -------------------------------------------------------
# PLUMB_PUBLIC_URL and `plumb connect --url`, printed into MCP client configurations
# and shell lines: a scheme, a host (a name, an IPv4 address or a bracketed IPv6 one)
# with an optional port, and an optional path prefix. No credentials, query or
# fragment, and no character that would need quoting in JSON, TOML or a shell word.
PUBLIC_URL_PATTERN = (
    r"^https?://(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?(?:/[A-Za-z0-9._~/-]*)?\Z"
)
PUBLIC_URL_MESSAGE = (
    "Use an http:// or https:// URL such as https://plumb.example.com or "
    "http://10.0.0.5:8000, without user:password@, query or fragment."
)

# --- pages -----------------------------------------------------------------------------
PAGE_DEFAULT = 50
LIST_MAX = 200  # conversations, mentions
READ_MAX = 500  # room events in one read
KINDS_PARAM_MAX = 200  # the comma-separated ?kinds= list
MAX_SEQ = 2**62  # a seq past this overflows the database's 64-bit column

# --- search (SPEC §9; common/search/) -------------------------------------------------
SEARCH_QUERY_MAX = 500  # characters of a query
SEARCH_TERMS_MAX = 16  # words and phrases, exclusions included
SEARCH_WORDS_MAX = 32  # words in all of them (a phrase counts each of its words)
SEARCH_PREFIX_MIN = 3  # characters before a prefix's "*"
SEARCH_WORD_MAX = 100  # characters of an indexed word; longer words are cut to this
SEARCH_PAGE_DEFAULT = 20
SEARCH_PAGE_MAX = 100
SEARCH_CURSOR_MAX = 200
# Matches of each kind (messages, notes) a search ranks: the newest this many on the
# server. Bounds the work of a query that matches most of history.
SEARCH_RANKED_MAX = 10_000

# --- waiting ---------------------------------------------------------------------------
# Seconds a long-poll may wait: check_messages, read_messages, wait_for_activity (SPEC §3.3).
WAIT_MAX = 30


def json_schema_pattern(pattern: str) -> str:
    """The ECMA-262 form of a ``\\Z``-anchored pattern, as JSON Schema publishes it."""
    return pattern.replace(r"\Z", "$")
