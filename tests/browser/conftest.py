"""Browser tests: Playwright for Python (sync API) driving Debian's chromium.

Never a downloaded browser: the set-up installs Debian's ``chromium`` package
with apt-get when ``/usr/bin/chromium`` is missing (CI runs as root on a fresh
machine), and Playwright launches that binary. The server is pytest-django's
``live_server``, which serves static files too, so every test is transactional.

Playwright's sync API keeps an asyncio loop running in this thread while the
browser is open, and Django refuses ORM calls from a thread with a running
loop. ``DJANGO_ALLOW_ASYNC_UNSAFE`` lifts that check while, and only while,
the browser fixture is up: these tests make ORM calls between browser steps
and nothing else runs concurrently in this thread.
"""

from __future__ import annotations

import importlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import Group, Permission
from playwright.sync_api import Browser, Page, sync_playwright

from tests.factories import participants_group

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# Where screenshot() saves: screenshots/ in the checkout (git-ignored) unless
# PLUMB_SCREENSHOTS names another folder.
SCREENSHOTS = Path(os.environ.get("PLUMB_SCREENSHOTS") or Path(settings.BASE_DIR) / "screenshots")
PASSWORD = "correct horse battery staple"


def _apt_get(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["apt-get", *args],
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )


def ensure_chromium() -> None:
    """Install Debian's chromium when it is missing; fail (never skip) when that fails."""
    if Path(CHROMIUM).exists():
        return
    installed = _apt_get("install", "-y", "chromium")
    if installed.returncode != 0:
        # A fresh machine may have no package lists yet.
        _apt_get("update")
        installed = _apt_get("install", "-y", "chromium")
    if installed.returncode != 0 or not Path(CHROMIUM).exists():
        pytest.fail(f"Could not install chromium with apt-get:\n{installed.stderr[-2000:]}")


@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    ensure_chromium()
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            launched = playwright.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
            )
            yield launched
            launched.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def dialogs() -> list[str]:
    """Messages of every JavaScript dialog (alert, confirm, prompt) any page opened."""
    return []


@pytest.fixture(params=[True], ids=["js"])
def javascript(request) -> bool:
    """Whether the page runs scripts; a test asks for both with ``indirect`` parametrize."""
    return request.param


@pytest.fixture
def page(browser: Browser, live_server, dialogs: list[str], javascript: bool) -> Iterator[Page]:
    context = browser.new_context(
        base_url=live_server.url,
        viewport={"width": 1360, "height": 900},
        locale="en-US",
        java_script_enabled=javascript,
    )
    context.set_default_timeout(15_000)
    opened = context.new_page()

    def record(dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    opened.on("dialog", record)
    yield opened
    context.close()


def screenshot(page: Page, name: str) -> Path:
    """Save the whole page to ``SCREENSHOTS/<name>.png`` for people to look at."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def log_in(page: Page, username: str, password: str = PASSWORD) -> None:
    page.goto("/admin/login/?next=/admin/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/")


def moderators_group() -> Group:
    """The migration's group. A transactional test's flush empties every table, so an
    earlier browser test may have removed it: recreate it from the migration's own list."""
    migration = importlib.import_module("rooms.migrations.0003_moderators_group")
    gains = importlib.import_module("rooms.migrations.0008_participants_group").MODERATOR_GAINS
    group, _ = Group.objects.get_or_create(name="moderators")
    for app_label, codenames in [*migration.MODERATOR_PERMISSIONS.items(), *gains.items()]:
        group.permissions.add(
            *Permission.objects.filter(content_type__app_label=app_label, codename__in=codenames)
        )
    return group


@pytest.fixture
def participant(transactional_db, django_user_model):
    """``ada`` (Ada Lovelace), staff in the ``participants`` group: she takes part, no more."""
    user = django_user_model.objects.create_user(
        "ada", "ada@example.com", PASSWORD, is_staff=True, first_name="Ada", last_name="Lovelace"
    )
    user.groups.add(participants_group())
    return user


@pytest.fixture
def superuser(transactional_db, django_user_model):
    return django_user_model.objects.create_superuser("ops", "ops@example.com", PASSWORD)


@pytest.fixture
def moderator(transactional_db, django_user_model):
    user = django_user_model.objects.create_user("mod", "mod@example.com", PASSWORD, is_staff=True)
    user.groups.add(moderators_group())
    return user
