"""Every command the ``plumb`` command prints as a hint runs as printed from the checkout
(SPEC §5; issue 24, item 3).

A reader pastes a hint into a shell in the checkout, without the virtual
environment activated. So the tests run the command as the hints name it,
``.venv/bin/plumb`` (the wrapper ``make install`` writes), through bash with a
plain ``PATH``, in real processes against a throwaway SQLite database: first
the paths that print hints (bootstrap, key create, connect, errors that say
where to look an id up), then every command line those printed, with only the
placeholders filled in.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from plumb_site.management.commands.plumb import LOOK_UP

REPO_ROOT = Path(__file__).resolve().parents[3]
# The documented form of every hint (docs/operators.md, "The `plumb` command").
COMMAND = ".venv/bin/plumb"
WRAPPER = REPO_ROOT / COMMAND
# A command a hint names: quoted in backticks inside a sentence (any form of running
# plumb or manage.py, so that one that does not work is caught too), or a line of its own.
HINT = re.compile(
    r"`((?:\.venv/bin/|python\S* |manage\.py |plumb )[^`]*)`|^(\.venv/bin/.+)$", re.MULTILINE
)
# What a reader fills in, filled in with rows the database has.
PLACEHOLDERS = {"<room>": "ops"}
SEED = """
from mailbox import services
from mailbox.models import ProjectKey
from rooms import services as rooms

started = services.session_start(ProjectKey.objects.get(), workspace_slug="default", name="seed")
rooms.room_create(started.session, slug="ops")
rooms.message_send(started.session, "ops", body="hello")
"""
# Each prints a hint: the first bootstrap a key (and how to revoke it) and the
# admin's login, the second where to get a key; the errors where to look ids up.
HINT_PRINTING = [
    "bootstrap",
    "bootstrap",
    "key create default",
    "connect default default builder --client claude-code",
    "connect default default builder --client json --new-key",
    "project set nowhere --mailbox off",
    "key revoke zzzzzzzz",
    "room lock nowhere --reason freeze",
    "message hide msg_nothing --reason spoiler",
    "conversation lock cnv_nothing --reason spam",
    "session end nobody",
]


def shell(line: str, env: dict[str, str], cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess:
    """Run ``line`` as a reader pasting it would: bash, in ``cwd``, no virtualenv on PATH."""
    return subprocess.run(
        ["bash", "-c", line],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,  # no terminal: createsuperuser says so and stops
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def hints(output: str) -> list[str]:
    return [(quoted or whole).strip() for quoted, whole in HINT.findall(output)]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A plain shell's environment with its own migrated SQLite database."""
    assert os.access(WRAPPER, os.X_OK), f"{COMMAND} is missing: `make install` writes it"
    base = tmp_path_factory.mktemp("hints")
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(base),
        "LANG": "C.UTF-8",
        "DATABASE_URL": f"sqlite:///{base / 'hints.sqlite3'}",
        "PLUMB_VAR_DIR": str(base / "var"),
    }
    migrated = shell(".venv/bin/python manage.py migrate --noinput -v 0", env)
    assert migrated.returncode == 0, migrated.stderr
    return env


def test_every_command_a_hint_names_runs_as_printed_from_the_checkout(env):
    printed: dict[str, str] = {}
    for args in HINT_PRINTING:
        result = shell(f"{COMMAND} {args}", env)
        assert "usage:" not in result.stderr, (args, result.stderr)
        if args == "bootstrap" and not printed:
            seeded = shell(f".venv/bin/python manage.py shell -c '{SEED}'", env)
            assert seeded.returncode == 0, seeded.stderr
        for hint in hints(result.stdout + result.stderr):
            printed.setdefault(hint, args)

    for hint, source in printed.items():
        line = hint
        for placeholder, value in PLACEHOLDERS.items():
            line = line.replace(placeholder, value)
        assert "<" not in line, f"a placeholder to fill in, in {hint!r} (from plumb {source})"
        result = shell(line, env)
        failed = f"{hint!r}, printed by plumb {source}: {result.returncode}\n{result.stderr}"
        assert result.returncode == 0, failed
        for symptom in ("command not found", "No module named", "usage:", "Traceback"):
            assert symptom not in result.stderr, failed

    # Every path above printed its hint: how to log into the admin, where to get a
    # key, how to revoke each new one, and for each error where to look an id up.
    assert ".venv/bin/python manage.py createsuperuser" in printed, printed
    assert f"{COMMAND} key create default" in printed, printed
    revokes = [hint for hint in printed if hint.startswith(f"{COMMAND} key revoke ")]
    assert len(revokes) == 3, printed  # bootstrap's key, key create's and connect's
    look_ups = {" ".join([COMMAND, *words]) for words in LOOK_UP.values()}
    assert look_ups <= set(printed), printed


def test_the_wrapper_runs_from_any_directory_of_the_checkout(env):
    from_root = shell(f"{COMMAND} project list", env)
    from_below = shell(f"../../{COMMAND} project list", env, cwd=REPO_ROOT / "plumb_site" / "cli")
    by_full_path = shell(f"{WRAPPER} project list", env, cwd=REPO_ROOT / "tests")

    for result in (from_root, from_below, by_full_path):
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines()[0].split() == [
            "SLUG",
            "MAILBOX",
            "MAX_EXCHANGES",
            "ACCEPT_ALL",
            "NOTE_TTL",
            "NAME",
        ]


def test_usage_names_the_command_as_hints_do(env):
    result = shell(f"{COMMAND} key revoke", env)
    assert result.returncode == 2
    assert result.stderr.startswith(f"usage: {COMMAND} key revoke [-h]")


# --- the wrapper `make install` writes ---------------------------------------------------


FAKE_MANAGE = "import os, sys\nprint(os.path.abspath(__file__))\nprint(sys.argv[1:])\n"


def test_make_writes_the_wrapper_once_and_it_acts_on_the_checkout_it_is_called_in(tmp_path):
    """A stand-in checkout whose ``manage.py`` says where it is and what it was given.

    A second checkout shares the first one's environment through a symlinked
    ``.venv``, as git worktrees may: its wrapper must act on its own checkout.
    """
    checkout, other = tmp_path / "checkout", tmp_path / "other"
    venv = checkout / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    requirements = (REPO_ROOT / "requirements.txt").read_bytes()
    stamp = subprocess.run(
        ["sha1sum"], input=requirements, capture_output=True, check=True
    ).stdout.decode()[:12]
    (venv / f".installed-{stamp}").touch()  # installed: make must only write the wrapper
    for root in (checkout, other):
        (root / "sub").mkdir(parents=True)
        (root / "manage.py").write_text(FAKE_MANAGE)
    (other / ".venv").symlink_to(venv)

    def make() -> subprocess.CompletedProcess:
        return subprocess.run(
            ["make", "-s", "-C", str(REPO_ROOT), f"VENV={venv}", f"{venv}/bin/plumb"],
            capture_output=True,
            text=True,
            check=False,
        )

    first = make()
    assert first.returncode == 0, first.stderr
    wrapper = venv / "bin" / "plumb"
    assert os.access(wrapper, os.X_OK)
    written = wrapper.stat().st_mtime_ns
    again = make()
    assert again.returncode == 0, again.stderr
    assert wrapper.stat().st_mtime_ns == written
    assert sorted(path.name for path in (venv / "bin").iterdir()) == ["plumb", "python"]

    for root in (checkout, other):
        ran = shell("../.venv/bin/plumb key list 'a b'", {"PATH": "/usr/bin:/bin"}, root / "sub")
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.splitlines() == [
            str(root / "manage.py"),
            str(["plumb", "key", "list", "a b"]),
        ]


# --- the README and docs/ -----------------------------------------------------------------


def test_the_readme_and_the_docs_name_manage_py_only_with_the_environments_python():
    documents = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
    assert len(documents) > 1
    bare = [
        f"{document.name}: {line}"
        for document in documents
        for line in document.read_text(encoding="utf-8").splitlines()
        if re.search(r"(?<!\.venv/bin/)python3? manage\.py", line)
    ]
    assert bare == []
