"""``plumb session list|end`` and ``plumb audit``: who is connected, and who did what."""

from __future__ import annotations

import argparse
from typing import Any

from django.utils import timezone

from mailbox import selectors, services
from mailbox.models import Session
from plumb_site.cli.text import (
    Console,
    cell,
    operator_name,
    positive_number,
    table,
    timestamp,
)


def add_parsers(groups: argparse._SubParsersAction) -> None:
    session = groups.add_parser("session", help="List sessions; end a name's open session.")
    actions = session.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser(
        "list", help="Sessions, newest first: name, workspace, project, times, state."
    )
    listing.add_argument("project", nargs="?", help="Only this project's sessions.")
    listing.add_argument(
        "--connected", action="store_true", help="Only sessions whose token still works."
    )
    listing.add_argument(
        "--limit", type=positive_number, default=100, metavar="N", help="At most N (100)."
    )
    listing.set_defaults(handler=session_list)

    end = actions.add_parser(
        "end", help="End NAME's open session: its token answers 401 session_ended."
    )
    end.add_argument("name", metavar="NAME", help="The agent name.")
    end.set_defaults(handler=session_end)

    audit = groups.add_parser(
        "audit", help="The audit trail, newest first: moderation, opt-in, key and session changes."
    )
    audit.add_argument("project", nargs="?", help="Only the records of this project slug.")
    audit.add_argument(
        "--limit", type=positive_number, default=50, metavar="N", help="At most N records (50)."
    )
    audit.set_defaults(handler=audit_list)


def session_state(session: Session, now: Any) -> str:
    """``connected``; ``expired`` (open, but its token answers ``session_expired``);
    or why it ended: ``ended``, ``expired``, ``key_revoked``."""
    if session.ended_at is not None:
        return session.end_reason or "ended"
    return "connected" if session.is_connected(now) else "expired"


def session_list(out: Console, options: dict[str, Any]) -> None:
    project = selectors.project_get_for_operator(options["project"]) if options["project"] else None
    sessions = selectors.session_list_for_operator(
        project, connected=options["connected"], limit=options["limit"]
    )
    now = timezone.now()
    rows = (
        [
            s.name.handle,
            s.workspace.slug,
            s.workspace.project.slug,
            timestamp(s.started_at),
            timestamp(s.last_seen_at),
            session_state(s, now),
            s.public_id,
        ]
        for s in sessions
    )
    header = ["NAME", "WORKSPACE", "PROJECT", "STARTED", "LAST_SEEN", "STATE", "SESSION"]
    for line in table(header, rows):
        out.say(line)


def session_end(out: Console, options: dict[str, Any]) -> None:
    handle = options["name"]
    open_sessions = selectors.name_sessions_open(handle)
    if not open_sessions:
        out.say(f"{handle} has no open session; nothing changed.")
        return
    for session in open_sessions:
        services.session_end(session, actor=operator_name())
        out.say(
            f"Ended session {session.public_id} of {handle} (workspace "
            f"{session.workspace.slug}, project {session.workspace.project.slug}): its token "
            "now answers 401 session_ended, and its undelivered notes wait for the name."
        )


def audit_list(out: Console, options: dict[str, Any]) -> None:
    slug = options["project"]
    records = selectors.audit_list(slug, limit=options["limit"])
    if slug and not records:
        # A deleted project's records stay listable by slug; only a slug that
        # names nothing at all is a mistake worth an error.
        selectors.project_get_for_operator(slug)
    rows = (
        [
            timestamp(r.created_at),
            cell(r.actor),
            r.action,
            r.project_slug or "-",
            r.room_slug or "-",
            cell(r.target),
            cell(r.reason),
        ]
        for r in records
    )
    header = ["WHEN", "ACTOR", "ACTION", "PROJECT", "ROOM", "TARGET", "REASON"]
    for line in table(header, rows):
        out.say(line)
