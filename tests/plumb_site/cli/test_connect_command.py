"""``plumb connect``: an MCP client's configuration for one agent (issue #17).

The printed configurations are parsed the way each client reads them (a
shell line, TOML, JSON), and the generic one drives plumb's MCP endpoint:
a configuration this command prints must work.
"""

from __future__ import annotations

import json
import os
import shlex
import tomllib
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from rest_framework.test import APIClient

from mailbox.models import AgentName, AuditRecord, ProjectKey, Session
from plumb_site import listening
from plumb_site.cli.connect import health_problem as real_health_problem
from plumb_site.settings import env_url
from tests.cli import last_line, plumb, plumb_fails
from tests.conftest import client_for
from tests.factories import AgentNameFactory, PersonFactory, UserFactory, WorkspaceFactory

pytestmark = pytest.mark.django_db

REPO_ROOT = Path(__file__).resolve().parents[3]
MODERN = "2026-07-28"


@pytest.fixture(autouse=True)
def operator(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr("getpass.getuser", lambda: "ops-alice")
    return "cli:ops-alice"


@pytest.fixture(autouse=True)
def where_make_serve_listens(monkeypatch: pytest.MonkeyPatch, settings, tmp_path) -> None:
    """No deployment settings and no server recorded: the URL is http://127.0.0.1:8000,
    and a server answers there, unless a test says otherwise."""
    monkeypatch.delenv("HOST", raising=False)
    monkeypatch.delenv("PORT", raising=False)
    settings.PLUMB_PUBLIC_URL = ""
    settings.VAR_DIR = tmp_path
    monkeypatch.setattr("plumb_site.cli.connect.health_problem", lambda url: None)


def connect_json(*extra: str, project: str = "", workspace: str = "main") -> tuple[dict, str]:
    out, err = plumb("connect", project, workspace, "builder", "--client", "json", *extra)
    return json.loads(out), err


def block(out: str, first: str) -> str:
    """The lines of ``out`` from the one that starts with ``first`` to the next blank line."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first))
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return "\n".join(lines[start:end])


# --- the generic JSON and the key -------------------------------------------------------


def test_json_with_a_new_key_is_one_json_object_that_works_against_the_mcp_endpoint(
    workspace, operator
):
    config, err = connect_json("--new-key", project=workspace.project.slug)

    key = ProjectKey.objects.get(project=workspace.project)
    assert config == {
        "transport": "streamable-http",
        "url": "http://127.0.0.1:8000/mcp",
        "headers": {
            "Authorization": config["headers"]["Authorization"],
            "Plumb-Workspace": "main",
            "Plumb-Name": "builder",
        },
        "project": workspace.project.slug,
        "workspace": "main",
        "name": "builder",
        "rest_url": "http://127.0.0.1:8000/api/v1/",
    }
    assert config["headers"]["Authorization"].startswith(f"Bearer {key.display_prefix}_")
    assert key.label == "json for builder in main"
    assert key.created_by == operator
    assert AuditRecord.objects.filter(action="key.create", actor=operator).count() == 1
    assert f"({key.display_prefix}) was issued just now and is shown only once" in err

    # The configuration as a client sends it: a stateless tools/call with those headers.
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "session_start",
            "arguments": {},
            "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN},
        },
    }
    headers = {
        **config["headers"],
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "session_start",
    }
    path = config["url"].removeprefix("http://127.0.0.1:8000")
    answer = Client().post(path, json.dumps(body), content_type="application/json", headers=headers)
    assert answer.status_code == 200
    result = answer.json()["result"]
    assert result["isError"] is False
    session = Session.objects.get(name__handle="builder")
    assert session.workspace == workspace
    assert session.project_key == key


def test_without_new_key_a_placeholder_stands_in_and_no_key_is_made(workspace):
    config, err = connect_json(project=workspace.project.slug)

    assert config["headers"]["Authorization"] == "Bearer <PROJECT_KEY>"
    assert not ProjectKey.objects.exists()
    assert "<PROJECT_KEY> stands for a project key" in err
    assert "cannot be shown again" in err
    assert f"plumb key create {workspace.project.slug}" in err
    assert "--new-key" in err


# --- the server's URL -------------------------------------------------------------------


def test_the_url_comes_from_plumb_public_url(workspace, settings):
    settings.PLUMB_PUBLIC_URL = "https://plumb.example.com/team"
    config, _ = connect_json(project=workspace.project.slug)
    assert config["url"] == "https://plumb.example.com/team/mcp"


def test_url_overrides_plumb_public_url(workspace, settings):
    settings.PLUMB_PUBLIC_URL = "https://plumb.example.com"
    config, _ = connect_json("--url", "http://10.0.0.5:8000/", project=workspace.project.slug)
    assert config["url"] == "http://10.0.0.5:8000/mcp"


@pytest.mark.parametrize(
    ("bound", "expected"),
    [
        (("127.0.0.1", 8765), "http://127.0.0.1:8765/mcp"),
        (("0.0.0.0", 9000), "http://127.0.0.1:9000/mcp"),
        (("::", 8001), "http://[::1]:8001/mcp"),
    ],
)
def test_without_a_url_it_is_where_the_running_server_recorded_it_listens(
    workspace, monkeypatch, bound, expected
):
    class Bound:
        def getsockname(self):
            return bound

    listening.record([Bound()])  # as the server's master does at start (this process: alive)
    monkeypatch.setenv("PORT", "abc")  # this shell's variables are not the server's

    config, _ = connect_json(project=workspace.project.slug)

    assert config["url"] == expected


def test_a_record_left_by_a_server_that_is_gone_is_ignored(workspace, settings):
    (Path(settings.VAR_DIR) / "server.json").write_text(
        json.dumps({"urls": ["http://127.0.0.1:8765"], "pid": 2**22 + 12345})
    )

    config, _ = connect_json(project=workspace.project.slug)

    assert config["url"] == "http://127.0.0.1:8000/mcp"


def test_when_nothing_answers_it_says_so_loudly_and_still_prints_the_configuration(
    workspace, monkeypatch
):
    # The real health check, against a port nothing listens on.
    monkeypatch.setattr("plumb_site.cli.connect.health_problem", real_health_problem)
    config, err = connect_json("--url", "http://127.0.0.1:9", project=workspace.project.slug)

    assert config["url"] == "http://127.0.0.1:9/mcp"
    assert "WARNING: nothing answers at http://127.0.0.1:9" in err
    assert "make serve" in err


@pytest.mark.parametrize(
    "url", ["ftp://plumb", "http://user:secret@plumb", "http://plumb/?x=1", "plumb:8000"]
)
def test_a_malformed_url_is_refused_before_a_key_is_made(workspace, url):
    error = plumb_fails(
        "connect", workspace.project.slug, "main", "builder", "--client", "json", "--new-key",
        "--url", url,
    )  # fmt: skip
    assert str(error).startswith("--url: Use an http:// or https:// URL")
    assert "(validation_error)" in str(error)
    assert error.returncode == 1
    assert not ProjectKey.objects.exists()
    assert not AgentName.objects.exists()


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("", ""),
        ("https://plumb.example.com/", "https://plumb.example.com"),
        ("http://[::1]:8000", "http://[::1]:8000"),
    ],
)
def test_plumb_public_url_from_the_environment(monkeypatch, raw, expected):
    monkeypatch.setenv("PLUMB_PUBLIC_URL", raw)
    assert env_url("PLUMB_PUBLIC_URL") == expected


@pytest.mark.parametrize("raw", ["plumb.example.com", "https://a b", "https://x/#frag"])
def test_a_malformed_plumb_public_url_stops_the_server_naming_the_variable(monkeypatch, raw):
    monkeypatch.setenv("PLUMB_PUBLIC_URL", raw)
    with pytest.raises(ImproperlyConfigured, match="PLUMB_PUBLIC_URL"):
        env_url("PLUMB_PUBLIC_URL")


# --- what the server would refuse, refused up front -------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("nowhere", "main", "builder"), "No project 'nowhere'. (project_not_found)"),
        (("{project}", "elsewhere", "builder"), "(workspace_not_found)"),
        (("{project}", "main", "next"), 'This name is reserved: "next"'),
        (("{project}", "main", "Builder!"), "(validation_error)"),
        (("{project}", "main", "taken"), "is bound to workspace 'other' of project"),
        (("{project}", "main", "ada"), "'ada' is a person's handle; pick another name"),
    ],
)
def test_what_the_server_would_refuse_is_refused_and_no_key_is_made(workspace, args, expected):
    AgentNameFactory(handle="taken", workspace=WorkspaceFactory(slug="other"))
    PersonFactory(user=UserFactory(username="ada"))
    args = tuple(arg.format(project=workspace.project.slug) for arg in args)

    error = plumb_fails("connect", *args, "--client", "codex", "--new-key")

    assert expected in str(error)
    assert error.returncode == 1
    assert not ProjectKey.objects.filter(project=workspace.project).exists()
    assert not AgentName.objects.filter(workspace=workspace).exists()
    assert not AuditRecord.objects.filter(action="name.reserve").exists()


def test_a_name_already_bound_to_this_workspace_is_fine(workspace):
    AgentNameFactory(handle="builder", workspace=workspace)
    config, err = connect_json(project=workspace.project.slug)
    assert config["name"] == "builder"
    assert "Reserved" not in err
    assert not AuditRecord.objects.filter(action="name.reserve").exists()


# --- the name is reserved: the first note to it waits (issue 24, item 4) ----------------


def test_connect_reserves_the_name_so_the_first_note_to_it_waits_for_its_first_session(
    workspace, alice, operator
):
    _, err = connect_json(project=workspace.project.slug)

    assert "Reserved the name builder in workspace main" in err
    name = AgentName.objects.get(handle="builder")
    assert name.workspace == workspace
    assert name.disposable is False
    assert not name.sessions.exists()
    assert list(
        AuditRecord.objects.filter(action="name.reserve").values_list("actor", "target")
    ) == [(operator, "name builder in workspace main")]

    left = client_for(alice).post(
        "/api/v1/notes/", {"to": "builder", "body": "welcome aboard"}, format="json"
    )
    assert left.status_code == 201, left.json()
    assert left.json()["delivery"] == "name"

    raw_key = last_line(plumb("key", "create", workspace.project.slug)[0])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_key}")
    started = client.post(
        "/api/v1/sessions/", {"workspace": "main", "name": "builder"}, format="json"
    )
    assert started.status_code == 201, started.json()
    assert [note["body"] for note in started.json()["notes"]] == ["welcome aboard"]


def test_connecting_the_same_name_again_reserves_and_records_nothing_more(workspace):
    connect_json(project=workspace.project.slug)

    _, err = connect_json(project=workspace.project.slug)

    assert "Reserved" not in err
    assert AgentName.objects.filter(handle="builder").count() == 1
    assert AuditRecord.objects.filter(action="name.reserve").count() == 1


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("p", "w", "n"), "the following arguments are required: --client"),
        (("p", "w", "n", "--client", "vim"), "invalid choice: 'vim'"),
    ],
)
def test_a_missing_or_unknown_client_is_a_usage_error(db, args, expected):
    assert expected in str(plumb_fails("connect", *args))


# --- each client's own form -------------------------------------------------------------


def test_claude_code_gets_its_mcp_add_line_the_skill_and_the_hooks(workspace):
    out, err = plumb(
        "connect", workspace.project.slug, "main", "builder", "--client", "claude-code", "--new-key"
    )

    key = ProjectKey.objects.get(project=workspace.project)
    raw = shlex.split(block(out, "claude mcp add"))[8].removeprefix("Authorization: Bearer ")
    assert raw.startswith(key.display_prefix)
    assert shlex.split(block(out, "claude mcp add")) == [
        "claude", "mcp", "add", "--transport", "http", "plumb", "http://127.0.0.1:8000/mcp",
        "--header", f"Authorization: Bearer {raw}",
        "--header", "Plumb-Workspace: main",
        "--header", "Plumb-Name: builder",
    ]  # fmt: skip
    assert err == ""

    # The skill: where it comes from (a file of this checkout) and where it goes.
    copy = shlex.split(block(out, "mkdir -p ~/.claude/skills/plumb-chat"))
    assert copy[copy.index("cp") + 1] == str(REPO_ROOT / "contrib/skills/plumb-chat/SKILL.md")
    assert copy[-1] == "~/.claude/skills/plumb-chat/SKILL.md"
    assert (REPO_ROOT / "contrib/skills/plumb-chat/SKILL.md").is_file()
    assert ".claude/skills/plumb-chat/SKILL.md in its directory" in out

    # A user-scope server with a fixed Plumb-Name makes every session one agent: the
    # advice says so, and offers it only for a single agent.
    step = block(out, "1. Add plumb's MCP server")
    assert "for that project only" in step
    assert "--scope user would make every session in every project builder" in step
    assert "only if you run a single agent" in step
    assert "add --scope user for every project" not in out

    # The hooks block, as .claude/settings.local.json holds it.
    hooks = json.loads(out[out.index("\n{\n") + 1 :])["hooks"]
    assert set(hooks) == {"SessionStart", "UserPromptSubmit"}
    for event, argument in (("SessionStart", "session-start"), ("UserPromptSubmit", "turn")):
        (hook,) = hooks[event][0]["hooks"]
        assert hook["type"] == "command"
        assert hook["timeout"] == 10
        words = shlex.split(hook["command"])
        assert words[:4] == [
            "PLUMB_URL=http://127.0.0.1:8000",
            f"PLUMB_KEY={raw}",
            "PLUMB_WORKSPACE=main",
            "PLUMB_NAME=builder",
        ]
        assert words[4:] == [str(REPO_ROOT / "contrib/hooks/plumb-hook"), argument]
        assert os.access(words[4], os.X_OK)


def test_codex_gets_an_environment_variable_and_a_config_toml_entry(workspace):
    out, _ = plumb("connect", workspace.project.slug, "main", "builder", "--client", "codex")

    assert block(out, "export ") == "export PLUMB_KEY='<PROJECT_KEY>'"
    assert "~/.codex/config.toml" in out
    assert tomllib.loads(block(out, "[mcp_servers.plumb]")) == {
        "mcp_servers": {
            "plumb": {
                "url": "http://127.0.0.1:8000/mcp",
                "bearer_token_env_var": "PLUMB_KEY",
                "http_headers": {"Plumb-Workspace": "main", "Plumb-Name": "builder"},
            }
        }
    }
    assert "<PROJECT_KEY> stands for a project key" in out


def test_cursor_gets_its_mcp_json(workspace):
    out, _ = plumb("connect", workspace.project.slug, "main", "builder", "--client", "cursor")

    assert ".cursor/mcp.json" in out
    config = json.loads(out[out.index("\n{\n") + 1 : out.index("\n}\n") + 2])
    assert config == {
        "mcpServers": {
            "plumb": {
                "url": "http://127.0.0.1:8000/mcp",
                "headers": {
                    "Authorization": "Bearer <PROJECT_KEY>",
                    "Plumb-Workspace": "main",
                    "Plumb-Name": "builder",
                },
            }
        }
    }
