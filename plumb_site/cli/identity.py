"""``plumb project|workspace|key|optin|bootstrap``: who may connect, and to whom."""

from __future__ import annotations

import argparse
import os
from typing import Any

from django.core.management.base import CommandParser

from mailbox import selectors, services
from mailbox.models import Project, ProjectKey
from plumb_site.cli.text import (
    Console,
    admin_url,
    command,
    on_off,
    on_off_text,
    one_line,
    operator_name,
    table,
    timestamp,
    whole_number,
)


def add_parsers(groups: argparse._SubParsersAction) -> None:
    _add_project_commands(groups)
    _add_workspace_commands(groups)
    _add_key_commands(groups)
    _add_optin_commands(groups)
    _add_bootstrap_command(groups)


def project_summary(project: Project) -> str:
    return (
        f"name {project.name!r}, mailbox {on_off_text(project.mailbox_enabled)}, "
        f"max_exchanges {project.max_exchanges}, "
        f"accept_all_projects {on_off_text(project.accept_all_projects)}, "
        f"note_ttl {project.note_ttl}, "
        + ", ".join(f"{field} {getattr(project, field)}" for field in POLICY_OPTIONS)
    )


# The policy options of `project create|set` (SPEC §8): setting, help.
POLICY_OPTIONS = {
    "daily_note_budget": "Notes the project's agents may send per UTC day (0: no budget).",
    "daily_message_budget": "Room messages and reviews the project's agents may post per UTC "
    "day (0: no budget).",
    "room_flood_limit": "Messages agents may post in a minute in one of the project's rooms "
    "before it pauses itself for a minute (default PLUMB_ROOM_FLOOD_LIMIT, 120 unless set; "
    "0: no limit).",
    "max_connected_sessions": "Sessions of the project that may be connected at once (0: no cap).",
    "retention_days": "Days notes and room events are kept; older ones are purged hourly "
    "(0: keep everything).",
}


# --- projects ---------------------------------------------------------------------------


def _add_project_commands(groups: argparse._SubParsersAction) -> None:
    project = groups.add_parser("project", help="Create, change and list projects.")
    actions = project.add_subparsers(dest="action", required=True, metavar="ACTION")

    create = actions.add_parser("create", help="Create a project.")
    create.add_argument("slug")
    _add_project_options(create)
    create.set_defaults(handler=project_create)

    update = actions.add_parser(
        "set", help="Change a project's name, collab settings, caps, budgets or retention."
    )
    update.add_argument("slug")
    _add_project_options(update)
    update.set_defaults(handler=project_set)

    listing = actions.add_parser("list", help="List projects with their collab settings.")
    listing.set_defaults(handler=project_list)


def _add_project_options(parser: CommandParser) -> None:
    # Every default is None ("not given"): `create` then leaves the service's
    # defaults in charge and `set` changes only what was named.
    parser.add_argument("--name", help="Human-readable name.")
    parser.add_argument(
        "--max-exchanges",
        type=whole_number,
        metavar="N",
        help="Notes a new conversation may hold (at least 1).",
    )
    parser.add_argument(
        "--mailbox",
        type=on_off,
        metavar="{on,off}",
        help="Whether sessions of the project may send and receive notes.",
    )
    parser.add_argument(
        "--accept-all-projects",
        type=on_off,
        metavar="{on,off}",
        help="Accept notes and room joins from every project, without opt-ins.",
    )
    parser.add_argument(
        "--note-ttl",
        type=whole_number,
        metavar="SECONDS",
        help="Seconds a note of the project's agents may wait to be picked up before it "
        "bounces (at least 1; default 604800, 7 days).",
    )
    for field, why in POLICY_OPTIONS.items():
        parser.add_argument(
            "--" + field.replace("_", "-"), type=whole_number, metavar="N", dest=field, help=why
        )


def _project_changes(options: dict[str, Any]) -> dict[str, Any]:
    given = {
        "name": options["name"],
        "max_exchanges": options["max_exchanges"],
        "mailbox_enabled": options["mailbox"],
        "accept_all_projects": options["accept_all_projects"],
        "note_ttl": options["note_ttl"],
        **{field: options[field] for field in POLICY_OPTIONS},
    }
    return {field: value for field, value in given.items() if value is not None}


def project_create(out: Console, options: dict[str, Any]) -> None:
    project = services.project_create(options["slug"], **_project_changes(options))
    out.say(f"Created project {project.slug}: {project_summary(project)}.")


def project_set(out: Console, options: dict[str, Any]) -> None:
    project = selectors.project_get_for_operator(options["slug"])
    changes = _project_changes(options)
    if not changes:
        out.say(f"Nothing to change for project {project.slug}: {project_summary(project)}.")
        return
    project = services.project_update(project, actor=operator_name(), **changes)
    out.say(f"Updated project {project.slug}: {project_summary(project)}.")


def project_list(out: Console, options: dict[str, Any]) -> None:
    rows = (
        [
            p.slug,
            on_off_text(p.mailbox_enabled),
            str(p.max_exchanges),
            on_off_text(p.accept_all_projects),
            str(p.note_ttl),
            one_line(p.name),
        ]
        for p in selectors.project_list()
    )
    headers = ["SLUG", "MAILBOX", "MAX_EXCHANGES", "ACCEPT_ALL", "NOTE_TTL", "NAME"]
    for line in table(headers, rows):
        out.say(line)


# --- workspaces -------------------------------------------------------------------------


def _add_workspace_commands(groups: argparse._SubParsersAction) -> None:
    workspace = groups.add_parser("workspace", help="Create workspaces.")
    actions = workspace.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser("create", help="Create a workspace in a project.")
    create.add_argument("project", help="Project slug.")
    create.add_argument("slug", help="Workspace slug, unique within the project.")
    create.set_defaults(handler=workspace_create)


def workspace_create(out: Console, options: dict[str, Any]) -> None:
    project = selectors.project_get_for_operator(options["project"])
    workspace = services.workspace_create(project, slug=options["slug"])
    out.say(f"Created workspace {workspace.slug} in project {project.slug}.")


# --- project keys -----------------------------------------------------------------------


def _add_key_commands(groups: argparse._SubParsersAction) -> None:
    key = groups.add_parser("key", help="Issue, list and revoke project keys.")
    actions = key.add_subparsers(dest="action", required=True, metavar="ACTION")

    create = actions.add_parser(
        "create", help="Issue a project key; it is printed alone on the last line, once."
    )
    create.add_argument("project", help="Project slug.")
    create.add_argument("--label", default="", help="What the key is for.")
    create.set_defaults(handler=key_create)

    listing = actions.add_parser("list", help="List keys by their non-secret prefix.")
    listing.add_argument("project", nargs="?", help="Only this project's keys.")
    listing.set_defaults(handler=key_list)

    revoke = actions.add_parser("revoke", help="Revoke a key and end the open sessions it started.")
    revoke.add_argument(
        "key",
        metavar="PREFIX_OR_KEY",
        help="The prefix (abcd1234 or plumb_key_abcd1234) or the whole key.",
    )
    revoke.set_defaults(handler=key_revoke)


def key_create(out: Console, options: dict[str, Any]) -> None:
    project = selectors.project_get_for_operator(options["project"])
    issued = services.key_create(project, label=options["label"], created_by=operator_name())
    out.say(f"Created project key {issued.key.display_prefix} for project {project.slug}.")
    say_key(out, issued)


def say_key(out: Console, issued: services.IssuedKey) -> None:
    """Print a new key last and alone on its line: `| tail -n1` must yield exactly the key."""
    out.say(
        "Store it now: it is shown only once (plumb keeps only a hash). "
        "It starts sessions: POST /api/v1/sessions/ with 'Authorization: Bearer <key>'. "
        f"`{command('key', 'revoke', issued.key.display_prefix)}` revokes it."
    )
    out.say(issued.raw)


def key_list(out: Console, options: dict[str, Any]) -> None:
    project = selectors.project_get_for_operator(options["project"]) if options["project"] else None
    rows = (
        [
            key.display_prefix,
            key.project.slug,
            "active" if key.is_active else "revoked",
            timestamp(key.created_at),
            timestamp(key.last_used_at, empty="never"),
            timestamp(key.revoked_at),
            key.created_by or "-",
            one_line(key.label),
        ]
        for key in selectors.key_list(project)
    )
    header = [
        "PREFIX",
        "PROJECT",
        "STATUS",
        "CREATED",
        "LAST_USED",
        "REVOKED",
        "CREATED_BY",
        "LABEL",
    ]
    for line in table(header, rows):
        out.say(line)


def key_revoke(out: Console, options: dict[str, Any]) -> None:
    key: ProjectKey = selectors.key_get_for_operator(options["key"])
    was_active = key.is_active
    ended = services.key_revoke(key, actor=operator_name())
    if was_active:
        out.say(
            f"Revoked project key {key.display_prefix} of project {key.project.slug} "
            f"and ended the {ended} open session(s) it started."
        )
    else:
        out.say(
            f"Project key {key.display_prefix} of project {key.project.slug} was already "
            f"revoked at {timestamp(key.revoked_at)}."
        )


# --- cross-project opt-ins --------------------------------------------------------------


def _add_optin_commands(groups: argparse._SubParsersAction) -> None:
    optin = groups.add_parser(
        "optin", help="Decide which projects may send notes to and join rooms of a project."
    )
    actions = optin.add_subparsers(dest="action", required=True, metavar="ACTION")

    grant = actions.add_parser("grant", help="PROJECT starts accepting traffic from SOURCE.")
    grant.add_argument("project", help="The project that accepts.")
    grant.add_argument(
        "--from", dest="source", required=True, metavar="SOURCE", help="Project allowed in."
    )
    grant.add_argument("--note", default="", help="Why (shown in the admin).")
    grant.set_defaults(handler=optin_grant)

    revoke = actions.add_parser("revoke", help="PROJECT stops accepting traffic from SOURCE.")
    revoke.add_argument("project", help="The project that accepted.")
    revoke.add_argument(
        "--from", dest="source", required=True, metavar="SOURCE", help="Project to turn away."
    )
    revoke.set_defaults(handler=optin_revoke)

    listing = actions.add_parser("list", help="List opt-ins.")
    listing.add_argument("project", nargs="?", help="Only the opt-ins this project granted.")
    listing.set_defaults(handler=optin_list)


def optin_grant(out: Console, options: dict[str, Any]) -> None:
    project = selectors.project_get_for_operator(options["project"])
    source = selectors.project_get_for_operator(options["source"])
    services.optin_grant(project, source=source, created_by=operator_name(), note=options["note"])
    out.say(f"Project {project.slug} now accepts notes and room joins from {source.slug}.")


def optin_revoke(out: Console, options: dict[str, Any]) -> None:
    project = selectors.project_get_for_operator(options["project"])
    source = selectors.project_get_for_operator(options["source"])
    services.optin_revoke(project, source=source, actor=operator_name())
    out.say(f"Project {project.slug} no longer has an opt-in for {source.slug}.")
    if not project.accept_all_projects:
        out.say(
            f"Agents of {source.slug} were removed from every room of {project.slug} "
            'they were in (reason "opt-in revoked").'
        )
    else:
        # Surprising otherwise: the revoke succeeded but traffic still flows.
        out.say(
            f"Note: {project.slug} has accept_all_projects on, so it still accepts "
            f"{source.slug} (and every other project)."
        )


def optin_list(out: Console, options: dict[str, Any]) -> None:
    project = selectors.project_get_for_operator(options["project"]) if options["project"] else None
    rows = (
        [
            optin.project.slug,
            optin.source.slug,
            timestamp(optin.created_at),
            optin.created_by or "-",
            one_line(optin.note),
        ]
        for optin in selectors.optin_list(project)
    )
    for line in table(["PROJECT", "ACCEPTS_FROM", "CREATED", "CREATED_BY", "NOTE"], rows):
        out.say(line)


# --- bootstrap --------------------------------------------------------------------------


def _add_bootstrap_command(groups: argparse._SubParsersAction) -> None:
    bootstrap = groups.add_parser(
        "bootstrap",
        help="Ensure a 'default' project and workspace exist (idempotent).",
        description=(
            "Create the 'default' project and its 'default' workspace when missing. "
            "Only when it creates the project does it also issue a key, printed alone "
            "on the last line."
        ),
    )
    bootstrap.add_argument(
        "--host",
        default=os.environ.get("HOST") or "127.0.0.1",
        help="Host the server listens on, for the admin URL it prints.",
    )
    bootstrap.add_argument(
        "--port",
        default=os.environ.get("PORT") or "8000",
        help="Port the server listens on, for the admin URL it prints.",
    )
    bootstrap.set_defaults(handler=bootstrap_run)


def bootstrap_run(out: Console, options: dict[str, Any]) -> None:
    done = services.site_bootstrap(created_by=operator_name())
    project, workspace, issued = done.project, done.workspace, done.issued
    workspace_created = done.workspace_created
    # Printed after commit, so a key is never shown for rows that were rolled back.
    where = f"project {project.slug}, workspace {workspace.slug}"
    if issued is None:
        if workspace_created:
            out.say(f"Created workspace {workspace.slug} in existing project {project.slug}.")
        else:
            out.say(
                f"Bootstrap: {where} already exist; no new key "
                f"(issue one with `{command('key', 'create', project.slug)}`)."
            )
        return
    out.say(f"Bootstrap: created {where}.")
    out.say(
        "Admin: create a login with `.venv/bin/python manage.py createsuperuser`, "
        f"then open {admin_url(options['host'], options['port'])}"
    )
    out.say(
        f"Project key {issued.key.display_prefix} for project {project.slug} "
        f"(agents use it with workspace '{workspace.slug}'):"
    )
    say_key(out, issued)
