"""What every part of the ``plumb`` command shares: argument types, the
operator's name, the one format of listings, and how a hint names a command.

Output contract scripts rely on (SPEC §5, §7):

* ``key create`` and a first ``bootstrap`` print the new key alone on the last
  line of standard output, so ``… | tail -n1`` captures it.
* Listings are columns under a header row, at least two spaces apart, with
  free text (names, labels, notes, reasons) flattened to one line and last,
  so ``split()`` (or, where a free-text column holds spaces, a split on two
  or more spaces) yields the columns. An empty cell is ``-``. Text an agent
  wrote (a room's title, a message's first line) has its control, bidi and
  invisible characters written out, as transcripts show them (``<U+202E>``).
* A domain error prints its message and stable code to standard error and
  exits 1; a malformed command line prints usage to standard error and exits 2.
* Every command a hint names starts with ``COMMAND`` and runs as printed from
  the checkout (``tests/plumb_site/cli/test_hints.py`` runs them all).
"""

from __future__ import annotations

import argparse
import getpass
import shlex
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from common.text import visible


class Console(Protocol):
    """The command as its handlers see it: somewhere to print."""

    def say(self, line: str = "") -> None: ...

    def hint(self, line: str) -> None: ...

    def write(self, text: str) -> None: ...


Handler = Callable[[Console, dict[str, Any]], None]

# The wrapper `make install` writes: `manage.py plumb` of this checkout, with the
# virtual environment's Python, from any directory. A bare `python manage.py`
# is the system's Python, which has no Django.
COMMAND = ".venv/bin/plumb"


def command(*words: str) -> str:
    """A command line for a hint, as pasted in the checkout: ``.venv/bin/plumb WORDS``.

    Words are shell-quoted where they need it; a ``<placeholder>`` is left as
    it is, for the reader to fill in.
    """
    quoted = (
        word if word.startswith("<") and word.endswith(">") else shlex.quote(word) for word in words
    )
    return " ".join([COMMAND, *quoted])


def on_off(value: str) -> bool:
    """Parse ``on``/``off``; argparse reports the error as a usage error naming the option."""
    lowered = value.strip().lower()
    if lowered == "on":
        return True
    if lowered == "off":
        return False
    raise argparse.ArgumentTypeError(f"expected 'on' or 'off', got {value!r}")


def whole_number(value: str) -> int:
    """Parse an integer; the service, not the parser, decides which values are allowed."""
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None


def positive_number(value: str) -> int:
    """A listing's ``--limit``: a bound on output, so the parser itself refuses 0."""
    number = whole_number(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {number}")
    return number


def operator_name() -> str:
    """``cli:<os user>``, recorded as ``created_by`` so the admin shows who acted."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no user name in the environment or the passwd database
        user = ""
    return f"cli:{user}"[:150] if user else "cli"


def on_off_text(value: bool) -> str:
    return "on" if value else "off"


def timestamp(value: datetime | None, *, empty: str = "-") -> str:
    """ISO 8601 UTC to the second: listings are read by people and split by scripts."""
    if value is None:
        return empty
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def one_line(text: str) -> str:
    """Free text flattened to one line, so a label or note cannot break a listing's rows."""
    return " ".join(text.split())


def cell(text: str) -> str:
    """A free-text cell: one line, and ``-`` when empty, so no column goes missing."""
    return one_line(text) or "-"


# Past this many characters, an agent's text is cut short in a listing.
PEER_TEXT_MAX = 80


def peer_cell(text: str, *, limit: int = PEER_TEXT_MAX) -> str:
    """Text an agent wrote, as one cell that cannot break, reorder or hide a listing.

    Flattened to one line and cut at ``limit`` characters (``…``), then every
    control, bidi and invisible character left is written out (``<U+200B>``):
    a terminal would act on an escape sequence, and a right-to-left override
    would make the columns after it read backwards.
    """
    flat = one_line(text)
    if len(flat) > limit:
        flat = flat[: limit - 1] + "…"
    return visible(flat) or "-"


def first_line(text: str) -> str:
    """The first line of a body that has something on it, as a ``peer_cell``."""
    return peer_cell(next((line for line in text.splitlines() if line.strip()), ""))


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """Left-aligned columns two spaces apart; the last column is not padded."""
    all_rows = [list(header), *(list(row) for row in rows)]
    widths = [max(len(row[i]) for row in all_rows) for i in range(len(header) - 1)]
    lines = []
    for row in all_rows:
        cells = [value.ljust(width) for value, width in zip(row, widths, strict=False)]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return lines


def server_url(host: str, port: str) -> str:
    """``http://host:port`` as ``make serve`` listens; IPv6 literals get their brackets."""
    # An IPv6 literal needs brackets in a URL; `make serve HOST=::1` passes it bare.
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{shown}:{port}"


def admin_url(host: str, port: str) -> str:
    return f"{server_url(host, port)}/admin/"
