"""``plumb export|purge``: taking a project's data out, and the retention purge on demand.

``export`` writes the project as JSON Lines on standard output, a line at a
time as it reads (``rooms.selectors.export``), so its memory stays flat
however large the project. ``purge`` runs the same purge the server runs
every hour (``rooms.services.retention``) and says what it deleted.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from django.utils.dateparse import parse_datetime

from common import metrics
from mailbox import selectors as mailbox_selectors
from plumb_site.cli.text import Console, operator_name
from rooms import services
from rooms.selectors.export import export_lines


def add_parsers(groups: argparse._SubParsersAction) -> None:
    export = groups.add_parser(
        "export",
        help="Write a project's rooms, members, events, conversations and notes as JSON Lines.",
        description="JSON Lines on standard output, one object per line with a 'type'; "
        "the schema is in docs/operators.md (Export).",
    )
    export.add_argument("project", help="Project slug.")
    export.add_argument("--room", metavar="ROOM", help="Only this room of the project.")
    export.add_argument(
        "--conversation", metavar="CONVERSATION_ID", help="Only this thread (cnv_…)."
    )
    export.add_argument(
        "--since",
        type=_moment,
        metavar="TIME",
        help="Only events and notes created at or after TIME (ISO 8601; UTC if no offset).",
    )
    export.set_defaults(handler=project_export)

    purge = groups.add_parser(
        "purge",
        help="Delete notes and room events older than each project's retention_days now "
        "(the server does it hourly); undelivered notes bounce first.",
    )
    purge.add_argument("project", nargs="?", help="Only this project.")
    purge.set_defaults(handler=project_purge)


def _moment(value: str) -> datetime:
    """``--since``: an ISO 8601 time, UTC unless it says otherwise."""
    try:
        parsed = parse_datetime(value) or datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an ISO 8601 time (2026-12-01T16:00:00Z), got {value!r}"
        ) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def project_export(out: Console, options: dict[str, Any]) -> None:
    project = mailbox_selectors.project_get_for_operator(options["project"])
    lines = export_lines(
        project, room=options["room"], conversation=options["conversation"], since=options["since"]
    )
    # Written as read: nothing is held but the line in hand.
    for line in lines:
        out.write(line)
    metrics.EXPORTS.inc()


def project_purge(out: Console, options: dict[str, Any]) -> None:
    slug = options["project"]
    project = mailbox_selectors.project_get_for_operator(slug) if slug else None
    done = services.purge_run(project, actor=operator_name())
    if not done:
        which = f"Project {slug} keeps" if slug else "No project purges: every one keeps"
        out.say(f"{which} everything (retention_days 0); nothing purged.")
        return
    for each, purged in done.items():
        out.say(
            f"Purged project {each}: {purged.text()}."
            if purged
            else f"Project {each}: nothing older than its retention; nothing purged."
        )
