"""``plumb connect``: the exact MCP client configuration for one agent, in one step.

plumb's MCP door is ``<url>/mcp``; a client acts as one stable agent name
with the project key as bearer and two headers naming the workspace and the
name (SPEC §6), so a restarted client is the same name again, with its rooms
and waiting notes. This prints that configuration in the form each client
reads, after checking everything the server would refuse later (project,
workspace, a claimable name), so a configuration it prints works. It
reserves the name in the workspace (``name_reserve``), so a note to the
agent waits for it from now on rather than ``recipient_not_found`` until the
client first connects.

Keys are stored hashed and cannot be shown again: ``--new-key`` issues one
(audited like ``plumb key create``) and prints it inside the configuration;
without it a placeholder stands in, with a word on where to get a key.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from common import limits
from common.errors import ValidationFailed
from mailbox import selectors, services
from mailbox.callers import NAME_HEADER, WORKSPACE_HEADER
from plumb_site import listening
from plumb_site.cli.text import Console, command, operator_name

CLIENTS = ("claude-code", "codex", "cursor", "json")
KEY_PLACEHOLDER = "<PROJECT_KEY>"
# The environment variable Codex reads the key from, and plumb-hook too.
KEY_VARIABLE = "PLUMB_KEY"
SERVER_NAME = "plumb"
MCP_PATH = "/mcp"
SKILL = Path("contrib/skills/plumb-chat/SKILL.md")
HOOK = Path("contrib/hooks/plumb-hook")
# A hook runs before the agent goes on; plumb-hook gives up on the network after
# 5 s (PLUMB_HOOK_TIMEOUT), so 10 s covers a session start and two reads.
HOOK_TIMEOUT = 10
# Addresses a server listens on but no client connects to.
# Where `make serve` listens unless told otherwise: the guess when no server runs here.
DEFAULT_URL = "http://127.0.0.1:8000"
HEALTH_TIMEOUT = 3  # seconds


def add_parsers(groups: argparse._SubParsersAction) -> None:
    connect = groups.add_parser(
        "connect",
        help="Print an MCP client's configuration for one agent name.",
        description=(
            "Print the configuration that connects an MCP client to plumb as NAME in "
            "WORKSPACE of PROJECT: the project key as bearer and the Plumb-Workspace "
            "and Plumb-Name headers, at <url>/mcp."
        ),
    )
    connect.add_argument("project", metavar="PROJECT", help="Project slug.")
    connect.add_argument("workspace", metavar="WORKSPACE", help="Workspace slug in that project.")
    connect.add_argument("name", metavar="NAME", help="The agent name the client acts as.")
    connect.add_argument("--client", required=True, choices=CLIENTS, help="Which client.")
    connect.add_argument(
        "--new-key",
        action="store_true",
        help="Issue a project key and put it in the configuration (shown only once).",
    )
    connect.add_argument(
        "--url",
        help="Where agents reach plumb (default: PLUMB_PUBLIC_URL, else http://HOST:PORT).",
    )
    connect.set_defaults(handler=connect_print)


@dataclass(frozen=True)
class Connection:
    url: str  # the server, without a trailing slash
    project: str
    workspace: str
    name: str
    key: str  # the raw key, or KEY_PLACEHOLDER

    @property
    def mcp_url(self) -> str:
        return self.url + MCP_PATH

    def headers(self) -> dict[str, str]:
        return {
            "Authorization": f"Bearer {self.key}",
            WORKSPACE_HEADER: self.workspace,
            NAME_HEADER: self.name,
        }

    def identity_headers(self) -> dict[str, str]:
        """The two headers without the key, for clients that take the key apart."""
        return {WORKSPACE_HEADER: self.workspace, NAME_HEADER: self.name}


def base_url(given: str | None) -> str:
    """``--url``, else ``PLUMB_PUBLIC_URL``, else where the running server listens.

    The running server records its own addresses (``plumb_site.listening``):
    this shell's HOST and PORT may not be the ones it was started with.
    """
    if given is not None:
        url = given.strip().rstrip("/")
        if re.match(limits.PUBLIC_URL_PATTERN, url) is None:
            raise ValidationFailed.field(
                "url", limits.PUBLIC_URL_MESSAGE, f"--url: {limits.PUBLIC_URL_MESSAGE}"
            )
        return url
    if settings.PLUMB_PUBLIC_URL:
        return settings.PLUMB_PUBLIC_URL
    return listening.recorded_url() or DEFAULT_URL


def health_problem(url: str) -> str | None:
    """Why no plumb server answers ``url/healthz``; None when one does."""
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=HEALTH_TIMEOUT) as response:
            if json.loads(response.read()).get("status") == "ok":
                return None
            return f"{url}/healthz answered without status ok"
    except urllib.error.HTTPError as error:
        return f"{url}/healthz answered {error.code}"
    except (OSError, ValueError) as error:
        return f"nothing answers at {url} ({getattr(error, 'reason', error)})"


def connect_print(out: Console, options: dict[str, Any]) -> None:
    # Everything the server would refuse is checked before the name is reserved
    # and a key issued, so a refused command leaves neither behind.
    project = selectors.project_get_for_operator(options["project"])
    workspace = selectors.workspace_get_for_operator(project, options["workspace"])
    url = base_url(options["url"])
    problem = health_problem(url)
    if problem is not None:
        # Loud, on standard error, before anything else: every line below names this address.
        for line in (
            "!" * 72,
            f"WARNING: {problem}.",
            "The configuration below points there; agents cannot connect until a",
            "plumb server answers: start one with `make serve` (see `make serve PORT=…`),",
            "or pass --url with the address agents should use.",
            "!" * 72,
        ):
            out.hint(line)
    client = options["client"]
    agent_name, reserved = services.name_reserve(workspace, options["name"], actor=operator_name())
    name = agent_name.handle
    name_note = (
        f"Reserved the name {name} in workspace {workspace.slug}: notes to it wait for "
        "its first session."
        if reserved
        else ""
    )

    key = KEY_PLACEHOLDER
    key_note = (
        f"{KEY_PLACEHOLDER} stands for a project key of {project.slug}. Keys are stored hashed "
        "and cannot be shown again: use the one you were given, issue one with "
        f"`{command('key', 'create', project.slug)}`, or run this again with --new-key."
    )
    if options["new_key"]:
        issued = services.key_create(
            project,
            label=f"{client} for {name} in {workspace.slug}",
            created_by=operator_name(),
        )
        key = issued.raw
        prefix = issued.key.display_prefix
        key_note = (
            f"The project key below ({prefix}) was issued just now and is shown only once "
            f"(plumb keeps only its hash); `{command('key', 'revoke', prefix)}` revokes it."
        )

    connection = Connection(
        url=url, project=project.slug, workspace=workspace.slug, name=name, key=key
    )
    if client == "json":
        # Standard output is the JSON alone, for scripts; the word on the key goes aside.
        out.say(json.dumps(generic_json(connection), indent=2))
        for line in filter(None, (name_note, key_note)):
            out.hint(line)
        return
    title = {"claude-code": "Claude Code", "codex": "Codex", "cursor": "Cursor"}[client]
    out.say(
        f"{title}: plumb at {connection.mcp_url} as {name} "
        f"(workspace {workspace.slug}, project {project.slug})."
    )
    for line in filter(None, (name_note, key_note)):
        out.say(line)
    out.say()
    render = {"claude-code": claude_code, "codex": codex, "cursor": cursor}[client]
    for line in render(connection):
        out.say(line)


def _in_checkout(path: Path) -> str:
    """An absolute path in this plumb checkout, for lines that copy or run files from it."""
    return str(Path(settings.BASE_DIR) / path)


def generic_json(connection: Connection) -> dict[str, Any]:
    return {
        "transport": "streamable-http",
        "url": connection.mcp_url,
        "headers": connection.headers(),
        "project": connection.project,
        "workspace": connection.workspace,
        "name": connection.name,
        "rest_url": f"{connection.url}/api/v1/",
    }


def claude_code(connection: Connection) -> list[str]:
    add = ["claude", "mcp", "add", "--transport", "http", SERVER_NAME, connection.mcp_url]
    for header, value in connection.headers().items():
        add += ["--header", f"{header}: {value}"]
    skill = _in_checkout(SKILL)
    return [
        "1. Add plumb's MCP server, from the project's directory: it is added for that "
        "project only (Claude Code's default local scope). Every Claude Code session there "
        f"acts as {connection.name}, so give each agent you run side by side a name of its "
        f"own. --scope user would make every session in every project {connection.name}: "
        "use it only if you run a single agent.",
        "",
        shlex.join(add),
        "",
        f"2. Give the agent the plumb-chat skill ({SKILL}: how to use plumb's tools well), "
        "for every project:",
        "",
        f"mkdir -p ~/.claude/skills/plumb-chat && cp {shlex.quote(skill)} "
        "~/.claude/skills/plumb-chat/SKILL.md",
        "",
        "   (or, for one project, into .claude/skills/plumb-chat/SKILL.md in its directory).",
        "",
        f"3. Optional: waiting notes and room news as context when a session starts and at "
        f"every prompt, from {HOOK}. Merge this into .claude/settings.local.json "
        "(your own settings, not committed: it holds the key):",
        "",
        json.dumps(claude_code_hooks(connection), indent=2),
    ]


def claude_code_hooks(connection: Connection) -> dict[str, Any]:
    """``SessionStart`` and ``UserPromptSubmit`` hooks running plumb-hook for this name."""
    environment = {
        "PLUMB_URL": connection.url,
        KEY_VARIABLE: connection.key,
        "PLUMB_WORKSPACE": connection.workspace,
        "PLUMB_NAME": connection.name,
    }
    prefix = " ".join(f"{variable}={shlex.quote(value)}" for variable, value in environment.items())
    hook = shlex.quote(_in_checkout(HOOK))

    def entry(command: str) -> list[dict[str, Any]]:
        return [
            {
                "hooks": [
                    {
                        "type": "command",
                        "command": f"{prefix} {hook} {command}",
                        "timeout": HOOK_TIMEOUT,
                    }
                ]
            }
        ]

    return {"hooks": {"SessionStart": entry("session-start"), "UserPromptSubmit": entry("turn")}}


def codex(connection: Connection) -> list[str]:
    # Codex reads a remote server's bearer token only from an environment variable
    # (bearer_token_env_var; an inline bearer_token is refused), and other headers
    # from http_headers. TOML's basic strings take JSON's escapes.
    headers = ", ".join(
        f"{json.dumps(header)} = {json.dumps(value)}"
        for header, value in connection.identity_headers().items()
    )
    return [
        "1. Codex sends a bearer token only from an environment variable; set it where "
        "Codex starts (your shell profile, for example):",
        "",
        f"export {KEY_VARIABLE}={shlex.quote(connection.key)}",
        "",
        "2. Add plumb's MCP server to ~/.codex/config.toml (or .codex/config.toml in a "
        "trusted project):",
        "",
        f"[mcp_servers.{SERVER_NAME}]",
        f"url = {json.dumps(connection.mcp_url)}",
        f"bearer_token_env_var = {json.dumps(KEY_VARIABLE)}",
        f"http_headers = {{ {headers} }}",
        "",
        f"How to use plumb's tools well: {_in_checkout(SKILL)} (an Agent Skills folder).",
    ]


def cursor(connection: Connection) -> list[str]:
    config = {
        "mcpServers": {SERVER_NAME: {"url": connection.mcp_url, "headers": connection.headers()}}
    }
    return [
        "Add plumb's MCP server to .cursor/mcp.json in the project (or ~/.cursor/mcp.json "
        'for every project), next to any other servers under "mcpServers":',
        "",
        json.dumps(config, indent=2),
        "",
        f"How to use plumb's tools well: {_in_checkout(SKILL)} (an Agent Skills folder).",
    ]
