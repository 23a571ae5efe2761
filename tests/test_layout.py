"""The floor plan, as a test: every import points down (docs/internals.md, "Where things live").

Read from the source with ``ast``, so imports inside functions count too (a
lazy import is still an arrow). The floors, bottom up:

* ``common``: imports no app and not ``plumb_site``;
* ``mailbox``: may import ``common``, never ``rooms``;
* ``rooms``: may import ``common`` and ``mailbox``;
* ``plumb_site``: the roof; nothing imports it but itself, ``manage.py``,
  ``bench/`` and tests.

And the front doors stay front doors: nothing imports ``<app>.api`` or
``<app>.admin`` except URL confs, ``plumb_site``, tests, the package itself,
and ``rooms.api`` / ``rooms.admin`` building on ``mailbox.api`` /
``mailbox.admin``. Services, errors and representations never reach up into
an API or an admin.

Who is calling is decided in one place, ``mailbox.callers``: nothing under
``plumb_site`` reads session, key or MCP session rows itself (no manager of
``Session``, ``ProjectKey`` or ``McpSession``); its doors ask ``callers``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
APPS = ("mailbox", "rooms")
DOORS = ("api", "admin")
# Folders whose Python files are read; tests are the one place allowed everything.
SOURCES = ("common", "mailbox", "rooms", "plumb_site", "bench", "scripts")


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, root: Path) -> list[tuple[int, str]]:
    """Every module ``path`` imports, absolute, with its line; relative imports resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = _module_name(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.append((node.lineno, module))
            # "from mailbox import api" imports mailbox.api.
            found.extend((node.lineno, f"{module}.{alias.name}") for alias in node.names)
    return found


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _door(module: str) -> str | None:
    """``mailbox.api`` for ``mailbox.api.views``; None for anything that is not a door."""
    parts = module.split(".")
    if len(parts) >= 2 and parts[0] in APPS and parts[1] in DOORS:
        return f"{parts[0]}.{parts[1]}"
    return None


def _broken_rule(importer: str, path: Path, imported: str) -> str | None:
    top = importer.split(".")[0]
    target = imported.split(".")[0]
    if top == "common" and target in (*APPS, "plumb_site"):
        return "common is the floor: it imports no app and not plumb_site"
    if top == "mailbox" and target == "rooms":
        return "mailbox never imports rooms (rooms builds on mailbox)"
    if target == "plumb_site" and top not in ("plumb_site", "manage", "bench"):
        return "plumb_site is the roof: only itself, manage.py, bench/ and tests import it"
    door = _door(imported)
    if door is not None:
        own_door = _door(importer)
        allowed = (
            top == "plumb_site"
            or path.name == "urls.py"
            or own_door == door
            or (own_door == f"rooms.{door.split('.')[1]}" and door.startswith("mailbox."))
        )
        if not allowed:
            return f"{door} is a front door: services, errors and representations never import it"
    return None


def layout_violations(root: Path) -> list[str]:
    """One line per forbidden import: ``file:line imports module: the rule``."""
    problems: dict[tuple[str, int, str], str] = {}
    files = [root / "manage.py"] if (root / "manage.py").exists() else []
    for folder in SOURCES:
        files.extend(sorted((root / folder).rglob("*.py")))
    for path in files:
        importer = _module_name(path, root)
        for line, imported in _imports(path, root):
            rule = _broken_rule(importer, path, imported)
            if rule is not None:
                # "from x import y" is read as x and x.y: one line, one report.
                problems.setdefault((str(path.relative_to(root)), line, rule), imported)
    return [
        f"{file}:{line} imports {imported}: {rule}"
        for (file, line, rule), imported in sorted(problems.items())
    ]


def test_every_import_points_down():
    assert layout_violations(ROOT) == []


# --- the speed-up layer stays contained ------------------------------------------------

# The services whose hot statements are prepared, each pinned by a query-count
# test of its operation (send, leave_note, check_messages, session_start).
PREPARED_SERVICES = frozenset(
    {
        "mailbox.services.delivery",
        "mailbox.services.notes",
        "mailbox.services.sessions",
        "rooms.services.sending",
        "rooms.services.stream",
    }
)


def prepared_users(root: Path) -> list[str]:
    """``module:line`` for each import of ``common.prepared`` outside selectors and
    the services above."""
    found = []
    for folder in SOURCES:
        for path in sorted((root / folder).rglob("*.py")):
            importer = _module_name(path, root)
            parts = importer.split(".")
            allowed = (
                importer in PREPARED_SERVICES
                or (len(parts) >= 2 and parts[0] in APPS and parts[1] == "selectors")
                or importer == "common.prepared"
            )
            for line, imported in _imports(path, root):
                if _within(imported, "common.prepared") and not allowed:
                    found.append(f"{importer}:{line}")
    return sorted(set(found))


def test_prepared_statements_are_used_only_by_selectors_and_the_hot_services():
    assert prepared_users(ROOT) == []


def test_a_prepared_statement_in_a_view_is_named(tmp_path):
    root = _tree(tmp_path, {"rooms/api/views.py": "from common.prepared import Prepared\n"})
    assert prepared_users(root) == ["rooms.api.views:1"]


# --- who is calling is decided in mailbox.callers -------------------------------------

IDENTITY_MODELS = frozenset({"Session", "ProjectKey", "McpSession"})
MANAGERS = frozenset({"objects", "_default_manager", "_base_manager"})


def identity_reads(root: Path) -> list[str]:
    """``file:line`` for each use of an identity model's manager under ``plumb_site``."""
    found = []
    for path in sorted((root / "plumb_site").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in MANAGERS
                and isinstance(node.value, ast.Name)
                and node.value.id in IDENTITY_MODELS
            ):
                found.append(f"{path.relative_to(root)}:{node.lineno} reads {node.value.id} rows")
    return found


def test_no_door_under_plumb_site_reads_identity_rows_itself():
    assert identity_reads(ROOT) == []


@pytest.mark.parametrize(
    "text",
    [
        "def f():\n    return Session.objects.filter(name='x')\n",
        "def f():\n    return ProjectKey._default_manager.all()\n",
        "def f():\n    return McpSession._base_manager.first()\n",
    ],
)
def test_an_identity_read_under_plumb_site_is_named(tmp_path, text):
    root = _tree(tmp_path, {"plumb_site/mcp/tools.py": text})
    assert [line.split(" reads ")[0] for line in identity_reads(root)] == [
        "plumb_site/mcp/tools.py:2"
    ]


def test_identity_models_named_without_their_manager_pass(tmp_path):
    text = "from mailbox.models import Session\n\ndef f(s: Session) -> str:\n    return s.name\n"
    assert identity_reads(_tree(tmp_path, {"plumb_site/mcp/tools.py": text})) == []


# --- the checker itself catches each kind of forbidden import --------------------------


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for folder in ("common", "mailbox", "rooms", "plumb_site", "mailbox/api", "rooms/api"):
        init = tmp_path / folder / "__init__.py"
        init.parent.mkdir(parents=True, exist_ok=True)
        init.touch()
    return tmp_path


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("common/errors.py", "from mailbox.models import Session\n", "common/errors.py:1 imports"),
        ("common/gate.py", "import plumb_site.settings\n", "common/gate.py:1 imports"),
        (
            "common/text.py",
            "def f():\n    from rooms import mentions\n",
            "common/text.py:2 imports rooms",
        ),
        ("mailbox/services.py", "from rooms.models import Room\n", "mailbox/services.py:1"),
        ("mailbox/services.py", "from mailbox import api\n", "imports mailbox.api: mailbox.api"),
        (
            "rooms/errors.py",
            "def f():\n    from .api.serializers import EventSerializer\n",
            "rooms/errors.py:2 imports rooms.api.serializers",
        ),
        ("rooms/models.py", "from plumb_site.ids import x\n", "plumb_site is the roof"),
        ("mailbox/api/views.py", "from rooms.api import views\n", "mailbox never imports rooms"),
        ("mailbox/representation.py", "from mailbox.admin import pages\n", "mailbox.admin"),
    ],
)
def test_a_forbidden_import_is_named_with_its_file_and_line(tmp_path, name, text, expected):
    root = _tree(tmp_path, {name: text})
    problems = layout_violations(root)
    assert len(problems) == 1, problems
    assert expected in problems[0]


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("common/errors.py", "from rest_framework import exceptions\nfrom common import ids\n"),
        ("mailbox/services.py", "from common.errors import PlumbError\n"),
        ("rooms/services.py", "from mailbox.models import Session\n"),
        ("rooms/api/views.py", "from mailbox.api.base import SessionApiView\n"),
        ("rooms/api/urls.py", "from rooms.api import views\n"),
        ("mailbox/api/views.py", "from . import serializers\n"),
        ("plumb_site/mcp.py", "from rooms.api import serializers\nfrom mailbox import api\n"),
        ("bench/run.py", "from plumb_site import settings\n"),
    ],
)
def test_an_allowed_import_passes(tmp_path, name, text):
    assert layout_violations(_tree(tmp_path, {name: text})) == []
