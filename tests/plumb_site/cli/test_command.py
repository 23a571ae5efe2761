"""The ``plumb`` management command (SPEC §5 last bullet, §7 bootstrap).

Most tests call the command in-process with ``call_command`` and assert output
and database state together. The exit-status contract (errors on stderr,
non-zero status, the key alone on the last line) only exists in a real
process, so ``TestRealProcess`` runs ``manage.py`` against its own SQLite file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from mailbox import credentials
from mailbox.models import AuditRecord, CrossProjectOptIn, Project, ProjectKey, Workspace
from tests.cli import last_line, plumb, plumb_fails
from tests.factories import OptInFactory, ProjectFactory, ProjectKeyFactory, WorkspaceFactory

pytestmark = pytest.mark.django_db

REPO_ROOT = Path(__file__).resolve().parents[3]


def start_session(raw_key: str, workspace: str, name: str = "bob"):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_key}")
    return client.post("/api/v1/sessions/", {"workspace": workspace, "name": name})


def secret_part(raw_key: str) -> str:
    return raw_key.split("_", 3)[3]


@pytest.fixture(autouse=True)
def operator(monkeypatch: pytest.MonkeyPatch) -> str:
    """A fixed OS user, so ``created_by`` is predictable."""
    monkeypatch.setattr("getpass.getuser", lambda: "ops-alice")
    return "cli:ops-alice"


# --- usage errors ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((), "required: GROUP"),
        (("project",), "required: ACTION"),
        (("key",), "required: ACTION"),
        (("frobnicate",), "invalid choice: 'frobnicate'"),
        (("key", "revoke"), "required: PREFIX_OR_KEY"),
    ],
)
def test_an_incomplete_command_line_is_a_usage_error(args: tuple[str, ...], expected: str):
    error = plumb_fails(*args)
    assert expected in str(error)
    assert error.returncode == 1


# --- project create ----------------------------------------------------------------------


def test_project_create_stores_every_option_given():
    out, err = plumb(
        "project",
        "create",
        "beta",
        "--name",
        "Beta team",
        "--max-exchanges",
        "5",
        "--mailbox",
        "off",
        "--accept-all-projects",
        "on",
    )
    project = Project.objects.get(slug="beta")
    assert project.name == "Beta team"
    assert project.max_exchanges == 5
    assert project.mailbox_enabled is False
    assert project.accept_all_projects is True
    assert "Created project beta" in out
    assert "max_exchanges 5" in out
    assert err == ""


def test_project_create_leaves_unnamed_settings_at_the_service_defaults():
    plumb("project", "create", "gamma")
    project = Project.objects.get(slug="gamma")
    assert project.name == "gamma"
    assert project.max_exchanges == 20
    assert project.mailbox_enabled is True
    assert project.accept_all_projects is False


def test_project_create_refuses_an_existing_slug():
    ProjectFactory(slug="beta", name="Original")
    error = plumb_fails("project", "create", "beta", "--name", "Impostor")
    assert "(already_exists)" in str(error)
    assert error.returncode == 1
    assert list(Project.objects.filter(slug="beta").values_list("name", flat=True)) == ["Original"]


# "--" ends the options, so a slug that starts with "-" reaches the service's check.
@pytest.mark.parametrize("slug", ["Beta", "-beta", "be_ta", "b" * 65])
def test_project_create_refuses_a_malformed_slug(slug: str):
    error = plumb_fails("project", "create", "--", slug)
    assert "(validation_error)" in str(error)
    assert error.returncode == 1
    assert not Project.objects.exists()


def test_project_create_refuses_max_exchanges_below_one():
    error = plumb_fails("project", "create", "beta", "--max-exchanges", "0")
    assert "max_exchanges" in str(error)
    assert "(validation_error)" in str(error)
    assert not Project.objects.exists()


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("--mailbox", "maybe", "argument --mailbox: expected 'on' or 'off', got 'maybe'"),
        ("--accept-all-projects", "yes", "argument --accept-all-projects: expected 'on' or 'off'"),
        ("--max-exchanges", "x", "argument --max-exchanges: expected a whole number, got 'x'"),
        ("--max-exchanges", "2.5", "argument --max-exchanges: expected a whole number"),
    ],
)
def test_project_create_rejects_malformed_option_values(option: str, value: str, expected: str):
    error = plumb_fails("project", "create", "beta", option, value)
    assert expected in str(error)
    assert not Project.objects.exists()


# --- project set -------------------------------------------------------------------------


def test_project_set_changes_only_the_settings_named():
    project = ProjectFactory(slug="beta", name="Beta", max_exchanges=7, accept_all_projects=False)
    out, _ = plumb("project", "set", "beta", "--mailbox", "off", "--accept-all-projects", "on")
    project.refresh_from_db()
    assert project.mailbox_enabled is False
    assert project.accept_all_projects is True
    assert project.name == "Beta"
    assert project.max_exchanges == 7
    assert "Updated project beta" in out
    assert "mailbox off" in out


def test_project_set_accept_all_projects_is_audited_naming_the_operator(operator: str):
    ProjectFactory(slug="beta", accept_all_projects=False)

    plumb("project", "set", "beta", "--accept-all-projects", "on")

    records = list(AuditRecord.objects.values_list("actor", "action", "project_slug", "target"))
    assert records == [(operator, "project.accept_all_projects", "beta", "off → on")]
    assert Project.objects.get(slug="beta").accept_all_projects is True


def test_project_set_to_the_values_it_has_records_nothing():
    ProjectFactory(slug="beta", name="Beta", max_exchanges=7, accept_all_projects=True)

    same = ["--accept-all-projects", "on", "--max-exchanges", "7", "--mailbox", "on"]
    out, _ = plumb("project", "set", "beta", *same, "--name", "Beta")

    assert "Updated project beta" in out
    assert not AuditRecord.objects.exists()


def test_project_set_records_one_change_per_setting(operator: str):
    ProjectFactory(slug="beta", name="Beta", max_exchanges=7)

    changes = ["--name", "Beta squad", "--max-exchanges", "3", "--mailbox", "off"]
    plumb("project", "set", "beta", *changes)

    records = set(AuditRecord.objects.values_list("actor", "action", "target"))
    assert records == {
        (operator, "project.name", "'Beta' → 'Beta squad'"),
        (operator, "project.max_exchanges", "7 → 3"),
        (operator, "project.mailbox", "on → off"),
    }


def test_a_refused_project_set_changes_and_records_nothing():
    ProjectFactory(slug="beta", max_exchanges=7, mailbox_enabled=True)

    plumb_fails("project", "set", "beta", "--mailbox", "off", "--max-exchanges", "0")

    project = Project.objects.get(slug="beta")
    assert (project.mailbox_enabled, project.max_exchanges) == (True, 7)
    assert not AuditRecord.objects.exists()


def test_project_set_can_rename_and_change_the_cap():
    project = ProjectFactory(slug="beta", name="Beta")
    plumb("project", "set", "beta", "--name", "Beta squad", "--max-exchanges", "3")
    project.refresh_from_db()
    assert project.name == "Beta squad"
    assert project.max_exchanges == 3


def test_project_set_without_options_changes_nothing():
    project = ProjectFactory(slug="beta", name="Beta", max_exchanges=7)
    out, _ = plumb("project", "set", "beta")
    project.refresh_from_db()
    assert (project.name, project.max_exchanges) == ("Beta", 7)
    assert "Nothing to change for project beta" in out


def test_project_set_on_an_unknown_project_fails():
    error = plumb_fails("project", "set", "nope", "--mailbox", "off")
    assert "(project_not_found)" in str(error)
    assert error.returncode == 1
    assert not Project.objects.exists()


def test_project_set_refuses_max_exchanges_below_one():
    project = ProjectFactory(slug="beta", max_exchanges=7)
    error = plumb_fails("project", "set", "beta", "--max-exchanges", "0")
    assert "(validation_error)" in str(error)
    project.refresh_from_db()
    assert project.max_exchanges == 7


def test_project_set_rejects_a_malformed_on_off_value():
    project = ProjectFactory(slug="beta", mailbox_enabled=True)
    error = plumb_fails("project", "set", "beta", "--mailbox", "maybe")
    assert "expected 'on' or 'off', got 'maybe'" in str(error)
    project.refresh_from_db()
    assert project.mailbox_enabled is True


# --- project list ------------------------------------------------------------------------


def test_project_list_shows_every_project_with_its_settings_in_slug_order():
    ProjectFactory(slug="zeta", name="Zeta squad", mailbox_enabled=False, max_exchanges=3)
    ProjectFactory(slug="alpha", name="Alpha", accept_all_projects=True)
    out, _ = plumb("project", "list")
    header, *rows = out.splitlines()
    assert header.split() == ["SLUG", "MAILBOX", "MAX_EXCHANGES", "ACCEPT_ALL", "NOTE_TTL", "NAME"]
    assert [row.split() for row in rows] == [
        ["alpha", "on", "20", "on", "604800", "Alpha"],
        ["zeta", "off", "3", "off", "604800", "Zeta", "squad"],
    ]


def test_project_list_of_an_empty_server_is_just_the_header():
    out, _ = plumb("project", "list")
    assert out.splitlines() == ["SLUG  MAILBOX  MAX_EXCHANGES  ACCEPT_ALL  NOTE_TTL  NAME"]


# --- workspace create --------------------------------------------------------------------


def test_workspace_create_adds_a_workspace_to_the_project():
    project = ProjectFactory(slug="beta")
    out, _ = plumb("workspace", "create", "beta", "ci")
    assert Workspace.objects.filter(project=project, slug="ci").exists()
    assert "Created workspace ci in project beta" in out


def test_workspace_slugs_are_unique_per_project_only():
    WorkspaceFactory(project=ProjectFactory(slug="alpha"), slug="ci")
    ProjectFactory(slug="beta")
    plumb("workspace", "create", "beta", "ci")
    assert Workspace.objects.filter(slug="ci").count() == 2


def test_workspace_create_refuses_an_existing_slug():
    WorkspaceFactory(project=ProjectFactory(slug="beta"), slug="ci")
    error = plumb_fails("workspace", "create", "beta", "ci")
    assert "(already_exists)" in str(error)
    assert error.returncode == 1
    assert Workspace.objects.count() == 1


def test_workspace_create_in_an_unknown_project_fails():
    error = plumb_fails("workspace", "create", "nope", "ci")
    assert "(project_not_found)" in str(error)
    assert not Workspace.objects.exists()


def test_workspace_create_refuses_a_malformed_slug():
    ProjectFactory(slug="beta")
    error = plumb_fails("workspace", "create", "beta", "Not OK")
    assert "(validation_error)" in str(error)
    assert not Workspace.objects.exists()


# --- key create --------------------------------------------------------------------------


def test_key_create_prints_the_key_alone_on_the_last_line_and_it_starts_sessions(
    operator: str,
):
    workspace = WorkspaceFactory(project=ProjectFactory(slug="beta"), slug="ci")
    out, err = plumb("key", "create", "beta", "--label", "ci runner")
    raw = last_line(out)
    parsed = credentials.parse(raw)
    assert parsed is not None
    assert parsed.kind == credentials.PROJECT_KEY
    assert len(out.splitlines()) > 1, "an explanation comes before the key"
    assert err == ""

    key = ProjectKey.objects.get()
    assert key.project == workspace.project
    assert key.prefix == parsed.prefix
    assert key.label == "ci runner"
    assert key.created_by == operator
    assert key.is_active

    response = start_session(raw, "ci")
    assert response.status_code == 201, response.json()
    assert response.json()["session"]["project"] == "beta"


def test_key_create_stores_only_a_digest_of_the_key():
    ProjectFactory(slug="beta")
    raw = last_line(plumb("key", "create", "beta")[0])
    key = ProjectKey.objects.get()
    assert key.key_hash == credentials.digest(raw)
    assert key.key_hash != raw
    for column, value in ProjectKey.objects.filter(pk=key.pk).values().get().items():
        assert raw not in str(value), column
        assert secret_part(raw) not in str(value), column


def test_key_create_records_plain_cli_when_the_os_user_is_unknown(
    monkeypatch: pytest.MonkeyPatch,
):
    def no_user() -> str:
        raise OSError("no user name")

    monkeypatch.setattr("getpass.getuser", no_user)
    ProjectFactory(slug="beta")
    plumb("key", "create", "beta")
    assert ProjectKey.objects.get().created_by == "cli"


def test_key_create_for_an_unknown_project_fails_and_issues_nothing():
    error = plumb_fails("key", "create", "nope")
    assert "(project_not_found)" in str(error)
    assert error.returncode == 1
    assert not ProjectKey.objects.exists()


# --- key list ----------------------------------------------------------------------------


def test_key_list_shows_prefixes_but_never_a_secret_or_hash():
    alpha_key = ProjectKeyFactory(project=ProjectFactory(slug="alpha"), label="deploy bot")
    beta_key = ProjectKeyFactory(project=ProjectFactory(slug="beta"), label="")
    out, _ = plumb("key", "list")
    header, *rows = out.splitlines()
    assert header.split() == [
        "PREFIX",
        "PROJECT",
        "STATUS",
        "CREATED",
        "LAST_USED",
        "REVOKED",
        "CREATED_BY",
        "LABEL",
    ]
    assert [row.split()[:3] for row in rows] == [
        [f"plumb_key_{alpha_key.prefix}", "alpha", "active"],
        [f"plumb_key_{beta_key.prefix}", "beta", "active"],
    ]
    assert rows[0].endswith("deploy bot")
    for key in (alpha_key, beta_key):
        assert secret_part(key.raw_key) not in out
        assert key.key_hash not in out


def test_key_list_for_one_project_shows_only_its_keys():
    alpha_key = ProjectKeyFactory(project=ProjectFactory(slug="alpha"))
    ProjectKeyFactory(project=ProjectFactory(slug="beta"))
    out, _ = plumb("key", "list", "alpha")
    rows = out.splitlines()[1:]
    assert [row.split()[0] for row in rows] == [f"plumb_key_{alpha_key.prefix}"]


def test_key_list_shows_last_use_and_revocation():
    workspace = WorkspaceFactory(project=ProjectFactory(slug="beta"), slug="ci")
    used = ProjectKeyFactory(project=workspace.project)
    revoked = ProjectKeyFactory(project=workspace.project)
    assert start_session(used.raw_key, "ci").status_code == 201
    plumb("key", "revoke", revoked.prefix)
    out, _ = plumb("key", "list", "beta")
    rows = {row.split()[0]: row.split() for row in out.splitlines()[1:]}
    used_row, revoked_row = rows[used.display_prefix], rows[revoked.display_prefix]
    assert used_row[2] == "active"
    assert used_row[4] != "never"
    assert used_row[5] == "-"
    assert revoked_row[2] == "revoked"
    assert revoked_row[4] == "never"
    assert revoked_row[5].endswith("Z")


def test_key_list_for_an_unknown_project_fails():
    error = plumb_fails("key", "list", "nope")
    assert "(project_not_found)" in str(error)
    assert error.returncode == 1


# --- key revoke --------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["prefix", "display_prefix", "whole_key"])
def test_key_revoke_by_any_form_stops_the_key_from_starting_sessions(form: str):
    workspace = WorkspaceFactory(project=ProjectFactory(slug="beta"), slug="ci")
    key = ProjectKeyFactory(project=workspace.project)
    other = ProjectKeyFactory(project=workspace.project)
    given = {"prefix": key.prefix, "display_prefix": key.display_prefix, "whole_key": key.raw_key}
    out, _ = plumb("key", "revoke", given[form])
    key.refresh_from_db()
    other.refresh_from_db()
    assert key.revoked_at is not None
    assert other.revoked_at is None
    assert f"Revoked project key {key.display_prefix}" in out
    assert secret_part(key.raw_key) not in out

    response = start_session(key.raw_key, "ci")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "key_revoked"
    assert start_session(other.raw_key, "ci", name="carol").status_code == 201


def test_key_revoke_twice_keeps_the_first_revocation_time():
    key = ProjectKeyFactory(project=ProjectFactory(slug="beta"))
    plumb("key", "revoke", key.prefix)
    key.refresh_from_db()
    first = key.revoked_at
    out, _ = plumb("key", "revoke", key.prefix)
    key.refresh_from_db()
    assert key.revoked_at == first
    assert "already revoked" in out


def test_key_revoke_of_an_unknown_prefix_fails():
    key = ProjectKeyFactory(project=ProjectFactory(slug="beta"))
    error = plumb_fails("key", "revoke", "zzzzzzzz")
    assert "(key_not_found)" in str(error)
    assert error.returncode == 1
    key.refresh_from_db()
    assert key.revoked_at is None


def test_key_revoke_of_a_whole_key_with_a_wrong_secret_fails():
    key = ProjectKeyFactory(project=ProjectFactory(slug="beta"))
    forged = f"plumb_key_{key.prefix}_{'A' * 43}"
    error = plumb_fails("key", "revoke", forged)
    assert "(key_not_found)" in str(error)
    key.refresh_from_db()
    assert key.revoked_at is None


# --- optin grant / revoke / list ---------------------------------------------------------


def test_optin_grant_records_who_and_why(operator: str):
    target, source = ProjectFactory(slug="q"), ProjectFactory(slug="p")
    out, _ = plumb("optin", "grant", "q", "--from", "p", "--note", "pairing on the API")
    optin = CrossProjectOptIn.objects.get()
    assert (optin.project, optin.source) == (target, source)
    assert optin.created_by == operator
    assert optin.note == "pairing on the API"
    assert "Project q now accepts notes and room joins from p" in out


def test_optin_grant_twice_fails():
    OptInFactory(project=ProjectFactory(slug="q"), source=ProjectFactory(slug="p"))
    error = plumb_fails("optin", "grant", "q", "--from", "p")
    assert "(already_exists)" in str(error)
    assert error.returncode == 1
    assert CrossProjectOptIn.objects.count() == 1


def test_optin_grant_to_itself_fails():
    ProjectFactory(slug="q")
    error = plumb_fails("optin", "grant", "q", "--from", "q")
    assert "(validation_error)" in str(error)
    assert not CrossProjectOptIn.objects.exists()


@pytest.mark.parametrize(("target", "source"), [("nope", "p"), ("q", "nope")])
def test_optin_grant_with_an_unknown_project_fails(target: str, source: str):
    ProjectFactory(slug="q")
    ProjectFactory(slug="p")
    error = plumb_fails("optin", "grant", target, "--from", source)
    assert "(project_not_found)" in str(error)
    assert not CrossProjectOptIn.objects.exists()


def test_optin_grant_needs_a_source():
    ProjectFactory(slug="q")
    error = plumb_fails("optin", "grant", "q")
    assert "the following arguments are required: --from" in str(error)
    assert not CrossProjectOptIn.objects.exists()


def test_optin_revoke_deletes_only_that_opt_in():
    q, p, r = ProjectFactory(slug="q"), ProjectFactory(slug="p"), ProjectFactory(slug="r")
    OptInFactory(project=q, source=p)
    OptInFactory(project=q, source=r)
    out, _ = plumb("optin", "revoke", "q", "--from", "p")
    assert list(CrossProjectOptIn.objects.values_list("project__slug", "source__slug")) == [
        ("q", "r")
    ]
    assert "Project q no longer has an opt-in for p" in out
    assert "accept_all_projects" not in out


def test_optin_revoke_warns_when_the_project_still_accepts_everyone():
    q = ProjectFactory(slug="q", accept_all_projects=True)
    OptInFactory(project=q, source=ProjectFactory(slug="p"))
    out, _ = plumb("optin", "revoke", "q", "--from", "p")
    assert not CrossProjectOptIn.objects.exists()
    assert "accept_all_projects on" in out


def test_optin_revoke_of_a_missing_opt_in_fails():
    OptInFactory(project=ProjectFactory(slug="p"), source=ProjectFactory(slug="q"))
    error = plumb_fails("optin", "revoke", "q", "--from", "p")
    assert "(optin_not_found)" in str(error)
    assert error.returncode == 1
    assert CrossProjectOptIn.objects.count() == 1


def test_optin_revoke_with_an_unknown_project_fails():
    ProjectFactory(slug="q")
    error = plumb_fails("optin", "revoke", "q", "--from", "nope")
    assert "(project_not_found)" in str(error)


def test_optin_list_shows_every_opt_in_or_one_projects():
    q, p, r = ProjectFactory(slug="q"), ProjectFactory(slug="p"), ProjectFactory(slug="r")
    OptInFactory(project=q, source=p, note="shared review\nsecond line", created_by="cli:bob")
    OptInFactory(project=r, source=q)

    out, _ = plumb("optin", "list")
    header, *rows = out.splitlines()
    assert header.split() == ["PROJECT", "ACCEPTS_FROM", "CREATED", "CREATED_BY", "NOTE"]
    assert [row.split()[:2] for row in rows] == [["q", "p"], ["r", "q"]]
    assert rows[0].split()[3:] == ["cli:bob", "shared", "review", "second", "line"]

    out, _ = plumb("optin", "list", "q")
    assert [row.split()[:2] for row in out.splitlines()[1:]] == [["q", "p"]]


def test_optin_list_for_an_unknown_project_fails():
    error = plumb_fails("optin", "list", "nope")
    assert "(project_not_found)" in str(error)
    assert error.returncode == 1


# --- bootstrap ---------------------------------------------------------------------------


def test_bootstrap_creates_the_default_project_workspace_and_a_working_key(operator: str):
    out, err = plumb("bootstrap", "--host", "0.0.0.0", "--port", "9000")
    project = Project.objects.get()
    assert project.slug == "default"
    assert list(project.workspaces.values_list("slug", flat=True)) == ["default"]
    key = ProjectKey.objects.get()
    assert key.project == project
    assert key.created_by == operator

    raw = last_line(out)
    assert credentials.parse(raw) is not None
    assert key.key_hash == credentials.digest(raw)
    assert ".venv/bin/python manage.py createsuperuser" in out
    assert "http://0.0.0.0:9000/admin/" in out
    assert err == ""
    assert start_session(raw, "default").status_code == 201


def test_bootstrap_is_idempotent_and_prints_a_key_only_the_first_time():
    first, _ = plumb("bootstrap")
    second, _ = plumb("bootstrap")
    assert Project.objects.count() == 1
    assert Workspace.objects.count() == 1
    assert ProjectKey.objects.count() == 1
    assert credentials.parse(last_line(first)) is not None
    assert len(second.splitlines()) == 1
    assert "already exist" in second
    assert "plumb_key_" not in second


def test_bootstrap_adds_a_missing_default_workspace_without_issuing_a_key():
    project = ProjectFactory(slug="default")
    out, _ = plumb("bootstrap")
    assert Workspace.objects.filter(project=project, slug="default").exists()
    assert not ProjectKey.objects.exists()
    assert "plumb_key_" not in out


def test_bootstrap_admin_url_brackets_an_ipv6_host():
    out, _ = plumb("bootstrap", "--host", "::1", "--port", "8001")
    assert "http://[::1]:8001/admin/" in out


# --- real processes: exit statuses and streams --------------------------------------------


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environment for ``manage.py`` subprocesses, with its own migrated SQLite file."""
    base = tmp_path_factory.mktemp("plumb_cli")
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{base / 'cli.sqlite3'}",
        "PLUMB_VAR_DIR": str(base / "var"),
        "DJANGO_SETTINGS_MODULE": "plumb_site.settings",
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return env


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", "plumb", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


class TestRealProcess:
    def test_key_create_exits_0_with_the_key_on_the_last_line(self, cli_env: dict[str, str]):
        assert run_cli(cli_env, "project", "create", "proc-keys").returncode == 0
        result = run_cli(cli_env, "key", "create", "proc-keys", "--label", "script")
        assert result.returncode == 0, result.stderr
        assert result.stderr == ""
        raw = last_line(result.stdout)
        assert credentials.parse(raw) is not None

        listing = run_cli(cli_env, "key", "list", "proc-keys")
        assert listing.returncode == 0
        assert f"plumb_key_{credentials.parse(raw).prefix}" in listing.stdout
        assert secret_part(raw) not in listing.stdout

        revoke = run_cli(cli_env, "key", "revoke", raw)
        assert revoke.returncode == 0, revoke.stderr
        again = run_cli(cli_env, "key", "list", "proc-keys")
        assert "revoked" in again.stdout

    def test_a_service_error_goes_to_stderr_with_status_1(self, cli_env: dict[str, str]):
        result = run_cli(cli_env, "project", "set", "no-such-project", "--mailbox", "off")
        assert result.returncode == 1
        assert result.stdout == ""
        assert "project_not_found" in result.stderr

    def test_a_refused_value_goes_to_stderr_with_status_1(self, cli_env: dict[str, str]):
        result = run_cli(cli_env, "project", "create", "proc-zero", "--max-exchanges", "0")
        assert result.returncode == 1
        assert result.stdout == ""
        assert "max_exchanges" in result.stderr
        assert "validation_error" in result.stderr
        listing = run_cli(cli_env, "project", "list")
        assert "proc-zero" not in listing.stdout

    @pytest.mark.parametrize(
        ("args", "expected"),
        [
            (("project", "create", "proc-bad", "--mailbox", "maybe"), "expected 'on' or 'off'"),
            (("project", "create", "proc-bad", "--max-exchanges", "x"), "expected a whole number"),
            (("optin", "grant", "proc-bad"), "required: --from"),
            ((), "required: GROUP"),
        ],
    )
    def test_a_malformed_command_line_is_a_usage_error_on_stderr(
        self, cli_env: dict[str, str], args: tuple[str, ...], expected: str
    ):
        result = run_cli(cli_env, *args)
        assert result.returncode == 2
        assert result.stdout == ""
        assert expected in result.stderr
        assert "usage:" in result.stderr

    def test_a_moderation_refusal_goes_to_stderr_with_status_1(self, cli_env: dict[str, str]):
        result = run_cli(cli_env, "room", "lock", "no-such-room", "--reason", "freeze")
        assert result.returncode == 1
        assert result.stdout == ""
        assert "room_not_found" in result.stderr

    def test_connect_json_prints_only_json_on_stdout(self, cli_env: dict[str, str]):
        assert run_cli(cli_env, "project", "create", "proc-connect").returncode == 0
        assert run_cli(cli_env, "workspace", "create", "proc-connect", "main").returncode == 0
        env = {**cli_env, "PLUMB_PUBLIC_URL": "https://plumb.example.com/"}

        result = run_cli(env, "connect", "proc-connect", "main", "builder", "--client", "json")

        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["url"] == "https://plumb.example.com/mcp"
        assert "<PROJECT_KEY> stands for a project key" in result.stderr

    def test_bootstrap_prints_a_key_only_on_the_first_run(self, cli_env: dict[str, str]):
        first = run_cli(cli_env, "bootstrap", "--host", "127.0.0.1", "--port", "8123")
        assert first.returncode == 0, first.stderr
        assert credentials.parse(last_line(first.stdout)) is not None
        assert "http://127.0.0.1:8123/admin/" in first.stdout

        second = run_cli(cli_env, "bootstrap")
        assert second.returncode == 0, second.stderr
        assert len(second.stdout.splitlines()) == 1
        assert "plumb_key_" not in second.stdout


# --- the audit trail (SPEC §5: every opt-in and key change is recorded) -------------------


def test_key_and_optin_changes_from_the_command_line_are_audited(monkeypatch):
    from mailbox.models import AuditRecord

    monkeypatch.setattr("getpass.getuser", lambda: "ops")
    project = ProjectFactory(slug="acme")
    ProjectFactory(slug="vendor")

    plumb("key", "create", "acme", "--label", "ci")
    key = ProjectKey.objects.get(project=project)
    plumb("key", "revoke", key.prefix)
    plumb("optin", "grant", "acme", "--from", "vendor", "--note", "joint incident")
    plumb("optin", "revoke", "acme", "--from", "vendor")

    records = list(
        AuditRecord.objects.order_by("id").values_list(
            "actor", "action", "project_slug", "target", "reason"
        )
    )
    assert records == [
        ("cli:ops", "key.create", "acme", key.display_prefix, "ci"),
        ("cli:ops", "key.revoke", "acme", f"{key.display_prefix} (0 session(s) ended)", ""),
        ("cli:ops", "optin.grant", "acme", "acme accepts vendor", "joint incident"),
        ("cli:ops", "optin.revoke", "acme", "acme accepts vendor", ""),
    ]


def test_a_refused_command_records_nothing():
    from mailbox.models import AuditRecord

    ProjectFactory(slug="acme")

    plumb_fails("optin", "revoke", "acme", "--from", "acme")
    plumb_fails("key", "revoke", "zzzzzzzz")

    assert not AuditRecord.objects.exists()
