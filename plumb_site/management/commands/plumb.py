"""``.venv/bin/plumb …`` (``manage.py plumb``): the admin's operator actions, for scripts.

One command, one argument parser; its groups and their handlers live in
``plumb_site/cli/`` (one module per group of actions). It is a door like
REST, MCP and the admin, so it lives at the roof, beside them; Django finds
it here because ``plumb_site`` is an installed app (``PlumbSiteConfig``).
``make install`` writes the ``.venv/bin/plumb`` wrapper that every hint names.

The output contract scripts rely on is in ``plumb_site.cli.text``.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from common.errors import PlumbError
from plumb_site.cli import connect, identity, moderation, policy, sessions
from plumb_site.cli.text import COMMAND, command

# Where an operator finds the ids a not-found error is about: the listing that shows them.
LOOK_UP = {
    "project_not_found": ("project", "list"),
    "key_not_found": ("key", "list"),
    "room_not_found": ("room", "list"),
    "message_not_found": ("message", "list", "<room>"),
    "conversation_not_found": ("note", "list"),
    "name_not_found": ("session", "list"),
}


class Command(BaseCommand):
    help = (
        "Operator actions for scripts: projects, workspaces, project keys, cross-project "
        "opt-ins, room and conversation moderation, listings of rooms, messages and notes, "
        "sessions, the audit trail, exports and the retention purge, an agent's MCP client "
        "configuration, and the bootstrap that `make serve` runs."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        # Usage lines name the command as hints do; subparsers take their prog
        # from this one when they are added, so it is set first.
        parser.prog = COMMAND
        # Django's CommandParser hands its "called from the command line" flag on to
        # subparsers, so a usage error exits 2 from a shell and raises CommandError
        # under call_command, at every level.
        groups = parser.add_subparsers(dest="group", required=True, metavar="GROUP")
        identity.add_parsers(groups)
        moderation.add_parsers(groups)
        sessions.add_parsers(groups)
        policy.add_parsers(groups)
        connect.add_parsers(groups)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            options["handler"](self, options)
        except PlumbError as exc:
            # Django prints a CommandError to stderr and exits with its returncode (1).
            # The stable code goes with the message so scripts can branch on it,
            # on the first line; a hint may follow on the next.
            message = f"{exc.message} ({exc.code})"
            if exc.code in LOOK_UP:
                message += f"\nLook it up with `{command(*LOOK_UP[exc.code])}`."
            raise CommandError(message) from exc

    def say(self, line: str = "") -> None:
        self.stdout.write(line)

    def write(self, text: str) -> None:
        """Text as it is, with no newline added: a stream of lines that end in their own."""
        self.stdout.write(text, ending="")

    def hint(self, line: str) -> None:
        """Guidance beside machine-readable output; on stderr, uncoloured, not an error."""
        self.stderr.write(line, style_func=str)
