"""``python manage.py plumb …``: the operator actions of the admin, for scripts.

This command only translates: arguments become service calls (writes) and
selector calls (listings), results become lines of text. Every rule lives in
``mailbox.services``, so the admin, the API and this command cannot disagree.

Output contract scripts rely on (SPEC §5, §7):

* ``key create`` and a first ``bootstrap`` print the new key alone on the last
  line of standard output, so ``… | tail -n1`` captures it.
* Listings are whitespace-separated columns under a header row, with the free
  text column (name, label, note) last so the others split cleanly.
* A domain error prints its message and stable code to standard error and
  exits 1; a malformed command line prints usage to standard error and exits 2.
"""

from __future__ import annotations

import argparse
import getpass
import os
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from common.errors import PlumbError
from mailbox import selectors, services
from mailbox.models import Project, ProjectKey


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


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """Left-aligned columns two spaces apart; the last column is not padded."""
    all_rows = [list(header), *(list(row) for row in rows)]
    widths = [max(len(row[i]) for row in all_rows) for i in range(len(header) - 1)]
    lines = []
    for row in all_rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return lines


def project_summary(project: Project) -> str:
    return (
        f"name {project.name!r}, mailbox {on_off_text(project.mailbox_enabled)}, "
        f"max_exchanges {project.max_exchanges}, "
        f"accept_all_projects {on_off_text(project.accept_all_projects)}"
    )


def admin_url(host: str, port: str) -> str:
    # An IPv6 literal needs brackets in a URL; `make serve HOST=::1` passes it bare.
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{shown}:{port}/admin/"


class Command(BaseCommand):
    help = (
        "Operator actions for scripts: projects, workspaces, project keys, cross-project "
        "opt-ins, and the bootstrap that `make serve` runs."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        # Django's CommandParser hands its "called from the command line" flag on to
        # subparsers, so a usage error exits 2 from a shell and raises CommandError
        # under call_command, at every level.
        groups = parser.add_subparsers(dest="group", required=True, metavar="GROUP")
        self._add_project_commands(groups)
        self._add_workspace_commands(groups)
        self._add_key_commands(groups)
        self._add_optin_commands(groups)

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
        bootstrap.set_defaults(handler="bootstrap")

    def _add_project_commands(self, groups: argparse._SubParsersAction) -> None:
        project = groups.add_parser("project", help="Create, change and list projects.")
        actions = project.add_subparsers(dest="action", required=True, metavar="ACTION")

        create = actions.add_parser("create", help="Create a project.")
        create.add_argument("slug")
        self._add_project_options(create)
        create.set_defaults(handler="project_create")

        update = actions.add_parser("set", help="Change a project's name or collab settings.")
        update.add_argument("slug")
        self._add_project_options(update)
        update.set_defaults(handler="project_set")

        listing = actions.add_parser("list", help="List projects with their collab settings.")
        listing.set_defaults(handler="project_list")

    def _add_project_options(self, parser: CommandParser) -> None:
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

    def _add_workspace_commands(self, groups: argparse._SubParsersAction) -> None:
        workspace = groups.add_parser("workspace", help="Create workspaces.")
        actions = workspace.add_subparsers(dest="action", required=True, metavar="ACTION")
        create = actions.add_parser("create", help="Create a workspace in a project.")
        create.add_argument("project", help="Project slug.")
        create.add_argument("slug", help="Workspace slug, unique within the project.")
        create.set_defaults(handler="workspace_create")

    def _add_key_commands(self, groups: argparse._SubParsersAction) -> None:
        key = groups.add_parser("key", help="Issue, list and revoke project keys.")
        actions = key.add_subparsers(dest="action", required=True, metavar="ACTION")

        create = actions.add_parser(
            "create", help="Issue a project key; it is printed alone on the last line, once."
        )
        create.add_argument("project", help="Project slug.")
        create.add_argument("--label", default="", help="What the key is for.")
        create.set_defaults(handler="key_create")

        listing = actions.add_parser("list", help="List keys by their non-secret prefix.")
        listing.add_argument("project", nargs="?", help="Only this project's keys.")
        listing.set_defaults(handler="key_list")

        revoke = actions.add_parser(
            "revoke", help="Revoke a key and end the open sessions it started."
        )
        revoke.add_argument(
            "key",
            metavar="PREFIX_OR_KEY",
            help="The prefix (abcd1234 or plumb_key_abcd1234) or the whole key.",
        )
        revoke.set_defaults(handler="key_revoke")

    def _add_optin_commands(self, groups: argparse._SubParsersAction) -> None:
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
        grant.set_defaults(handler="optin_grant")

        revoke = actions.add_parser("revoke", help="PROJECT stops accepting traffic from SOURCE.")
        revoke.add_argument("project", help="The project that accepted.")
        revoke.add_argument(
            "--from", dest="source", required=True, metavar="SOURCE", help="Project to turn away."
        )
        revoke.set_defaults(handler="optin_revoke")

        listing = actions.add_parser("list", help="List opt-ins.")
        listing.add_argument("project", nargs="?", help="Only the opt-ins this project granted.")
        listing.set_defaults(handler="optin_list")

    # --- dispatch -------------------------------------------------------------------

    def handle(self, *args: Any, **options: Any) -> None:
        handler = getattr(self, f"do_{options['handler']}")
        try:
            handler(options)
        except PlumbError as exc:
            # Django prints a CommandError to stderr and exits with its returncode (1).
            # The stable code goes with the message so scripts can branch on it.
            raise CommandError(f"{exc.message} ({exc.code})") from exc

    def say(self, line: str = "") -> None:
        self.stdout.write(line)

    # --- projects ---------------------------------------------------------------------

    def do_project_create(self, options: dict[str, Any]) -> None:
        project = services.project_create(options["slug"], **self._project_changes(options))
        self.say(f"Created project {project.slug}: {project_summary(project)}.")

    def do_project_set(self, options: dict[str, Any]) -> None:
        project = services.project_get(options["slug"])
        changes = self._project_changes(options)
        if not changes:
            self.say(f"Nothing to change for project {project.slug}: {project_summary(project)}.")
            return
        project = services.project_update(project, actor=operator_name(), **changes)
        self.say(f"Updated project {project.slug}: {project_summary(project)}.")

    def _project_changes(self, options: dict[str, Any]) -> dict[str, Any]:
        given = {
            "name": options["name"],
            "max_exchanges": options["max_exchanges"],
            "mailbox_enabled": options["mailbox"],
            "accept_all_projects": options["accept_all_projects"],
        }
        return {field: value for field, value in given.items() if value is not None}

    def do_project_list(self, options: dict[str, Any]) -> None:
        rows = (
            [
                p.slug,
                on_off_text(p.mailbox_enabled),
                str(p.max_exchanges),
                on_off_text(p.accept_all_projects),
                one_line(p.name),
            ]
            for p in selectors.project_list()
        )
        for line in table(["SLUG", "MAILBOX", "MAX_EXCHANGES", "ACCEPT_ALL", "NAME"], rows):
            self.say(line)

    # --- workspaces -------------------------------------------------------------------

    def do_workspace_create(self, options: dict[str, Any]) -> None:
        project = services.project_get(options["project"])
        workspace = services.workspace_create(project, slug=options["slug"])
        self.say(f"Created workspace {workspace.slug} in project {project.slug}.")

    # --- project keys -----------------------------------------------------------------

    def do_key_create(self, options: dict[str, Any]) -> None:
        project = services.project_get(options["project"])
        issued = services.key_create(project, label=options["label"], created_by=operator_name())
        self.say(f"Created project key {issued.key.display_prefix} for project {project.slug}.")
        self.say_key(issued.raw)

    def say_key(self, raw: str) -> None:
        """Print a new key last and alone on its line: `| tail -n1` must yield exactly the key."""
        self.say(
            "Store it now: it is shown only once (plumb keeps only a hash). "
            "It starts sessions: POST /api/v1/sessions/ with 'Authorization: Bearer <key>'."
        )
        self.say(raw)

    def do_key_list(self, options: dict[str, Any]) -> None:
        project = services.project_get(options["project"]) if options["project"] else None
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
            self.say(line)

    def do_key_revoke(self, options: dict[str, Any]) -> None:
        key: ProjectKey = services.key_find(options["key"])
        was_active = key.is_active
        ended = services.key_revoke(key, actor=operator_name())
        if was_active:
            self.say(
                f"Revoked project key {key.display_prefix} of project {key.project.slug} "
                f"and ended the {ended} open session(s) it started."
            )
        else:
            self.say(
                f"Project key {key.display_prefix} of project {key.project.slug} was already "
                f"revoked at {timestamp(key.revoked_at)}."
            )

    # --- cross-project opt-ins -------------------------------------------------------

    def do_optin_grant(self, options: dict[str, Any]) -> None:
        project = services.project_get(options["project"])
        source = services.project_get(options["source"])
        services.optin_grant(
            project, source=source, created_by=operator_name(), note=options["note"]
        )
        self.say(f"Project {project.slug} now accepts notes and room joins from {source.slug}.")

    def do_optin_revoke(self, options: dict[str, Any]) -> None:
        project = services.project_get(options["project"])
        source = services.project_get(options["source"])
        services.optin_revoke(project, source=source, actor=operator_name())
        self.say(f"Project {project.slug} no longer has an opt-in for {source.slug}.")
        if not project.accept_all_projects:
            self.say(
                f"Agents of {source.slug} were removed from every room of {project.slug} "
                'they were in (reason "opt-in revoked").'
            )
        else:
            # Surprising otherwise: the revoke succeeded but traffic still flows.
            self.say(
                f"Note: {project.slug} has accept_all_projects on, so it still accepts "
                f"{source.slug} (and every other project)."
            )

    def do_optin_list(self, options: dict[str, Any]) -> None:
        project = services.project_get(options["project"]) if options["project"] else None
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
            self.say(line)

    # --- bootstrap ---------------------------------------------------------------------

    def do_bootstrap(self, options: dict[str, Any]) -> None:
        done = services.site_bootstrap(created_by=operator_name())
        project, workspace, issued = done.project, done.workspace, done.issued
        workspace_created = done.workspace_created
        # Printed after commit, so a key is never shown for rows that were rolled back.
        where = f"project {project.slug}, workspace {workspace.slug}"
        if issued is None:
            if workspace_created:
                self.say(f"Created workspace {workspace.slug} in existing project {project.slug}.")
            else:
                self.say(
                    f"Bootstrap: {where} already exist; no new key "
                    f"(issue one with `manage.py plumb key create {project.slug}`)."
                )
            return
        self.say(f"Bootstrap: created {where}.")
        self.say(
            "Admin: create a login with `.venv/bin/python manage.py createsuperuser`, "
            f"then open {admin_url(options['host'], options['port'])}"
        )
        self.say(
            f"Project key {issued.key.display_prefix} for project {project.slug} "
            f"(agents use it with workspace '{workspace.slug}'):"
        )
        self.say_key(issued.raw)
