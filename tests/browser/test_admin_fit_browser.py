"""The admin at a laptop's width (1280 px) and a phone's (390 px): nothing past
the right edge of the page, every column of a table on screen without scrolling
sideways (a scroller inside the table would be the last resort, and none of
these pages needs one), state in words, times with their zone, Django's app
list folded on the home page.

The data is what a busy deployment shows: long slugs, labels and reasons,
sessions ended every way a session ends, keys active and revoked, a room
whose members joined, were muted, left and were removed. Each page is
photographed at each width (``screenshots/``, or ``$PLUMB_SCREENSHOTS``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import Browser, Page, expect

from mailbox import services as mailbox_services
from mailbox.models import Session
from rooms import services as room_services
from rooms.models import Member
from tests.browser.conftest import log_in, screenshot
from tests.factories import (
    OptInFactory,
    ProjectFactory,
    ProjectKeyFactory,
    SessionFactory,
    WorkspaceFactory,
)

pytestmark = pytest.mark.django_db(transaction=True)

WIDTHS = (1280, 390)
ROOM = "incident-2025-12-01-primary-database-failover"

# Where each header cell of a table is: on screen ("shown"), or to be scrolled
# to inside a horizontal scroller that is itself on screen ("scrolled"), or
# past the viewport's right edge, out of reach ("beyond"). And how wide the
# page is, which is wider than the viewport when anything sticks out.
HEADERS_JS = """
() => {
  const width = window.innerWidth;
  const found = {shown: [], scrolled: [], beyond: []};
  for (const cell of document.querySelectorAll('#content table thead th')) {
    const box = cell.getBoundingClientRect();
    // Not displayed (in a closed <details>), or there for screen readers only.
    if (!cell.checkVisibility({contentVisibilityAuto: true}) || box.width <= 1) continue;
    if (cell.closest('.visually-hidden')) continue;
    const name = cell.textContent.trim().replace(/\\s+/g, ' ') || '(checkbox)';
    let edge = width;
    let scroller = null;
    for (let up = cell.parentElement; up && up !== document.body; up = up.parentElement) {
      const style = getComputedStyle(up);
      if (style.overflowX === 'visible') continue;
      const frame = up.getBoundingClientRect();
      edge = Math.min(edge, frame.left + up.clientLeft + up.clientWidth);
      if (!scroller && /(auto|scroll)/.test(style.overflowX) && up.scrollWidth > up.clientWidth) {
        scroller = frame;
      }
    }
    if (box.right <= edge + 0.5) {
      found.shown.push(name);
    } else if (scroller && scroller.left >= -0.5 && scroller.right <= width + 0.5) {
      found.scrolled.push(name);
    } else {
      found.beyond.push(name);
    }
  }
  found.pageWidth = document.documentElement.scrollWidth;
  found.viewport = width;
  return found;
}
"""

# A time of day (Django's "3:05 p.m." or "03:05", with or without seconds) must
# be followed by its zone.
TIME_OF_DAY = re.compile(r"\b\d{1,2}:\d{2}(?::\d{2})?(?:\s*[ap]\.m\.)?(?![\d:])(?!\s*UTC)", re.I)


@pytest.fixture
def busy_admin(superuser) -> dict:
    """Three projects' worth of sessions, keys, opt-ins, audit records and one busy room."""
    acme = ProjectFactory(slug="acme-robotics-research", name="Acme Robotics Research")
    partner = ProjectFactory(slug="partner-labs-integration", name="Partner Labs")
    vendor = ProjectFactory(slug="vendor-observability", name="Vendor Observability")
    main = WorkspaceFactory(project=acme, slug="main")
    runners = WorkspaceFactory(project=acme, slug="ci-runners-eu-west-2")
    partner_ws = WorkspaceFactory(project=partner, slug="integration-sandbox")

    alice = SessionFactory(workspace=main, name="release-coordinator")
    bob = SessionFactory(workspace=main, name="error-rate-watcher")
    carol = SessionFactory(workspace=runners, name="build-watcher-eu-west-2")
    dave = SessionFactory(workspace=runners, name="flaky-test-triager")
    SessionFactory(workspace=WorkspaceFactory(project=vendor, slug="dashboards"), name="grafana")
    # Ended by an operator; replaced by a newer session of its name (expired).
    mailbox_services.session_end(
        SessionFactory(workspace=main, name="nightly-report-writer"), actor="admin:ops"
    )
    key = ProjectKeyFactory(project=acme, label="laptop")
    stale = mailbox_services.session_start(key, workspace_slug="main", name="docs-gardener")
    Session.objects.filter(pk=stale.session.pk).update(
        last_seen_at=timezone.now() - timedelta(days=2)
    )
    mailbox_services.session_start(key, workspace_slug="main", name="docs-gardener")

    # Keys: active ones with long labels, revoked ones (one ending a session).
    ProjectKeyFactory(project=acme, label="CI runners in eu-west-2, rotated every quarter")
    ProjectKeyFactory(project=partner, label="Partner Labs integration sandbox")
    leaked = ProjectKeyFactory(project=vendor, label="pasted into a public gist by mistake")
    mailbox_services.session_start(leaked, workspace_slug="dashboards", name="prometheus")
    mailbox_services.key_revoke(leaked, actor="admin:ops", reason="leaked in a public gist")
    mailbox_services.key_revoke(key, actor="cli:root")

    # The room: a creator, a muted member, one who left, one removed by a moderator
    # and one removed when its project's opt-in was revoked.
    room_services.room_create(alice, slug=ROOM, title="Primary database failover")
    for session in (bob, carol, dave):
        room_services.room_join(session, ROOM)
    OptInFactory(project=acme, source=partner, created_by="admin:ops")
    outsider = SessionFactory(workspace=partner_ws, name="partner-liaison")
    room_services.room_join(outsider, ROOM, display_name="Partner liaison")
    room_services.message_send(
        alice,
        ROOM,
        body="Failing over to the replica in eu-west-2 now; writes pause for about 40 seconds.",
    )
    room_services.message_send(bob, ROOM, body="Error rate back to 0.02% after the switch.")

    def member(session: Session) -> Member:
        return Member.objects.get(room__slug=ROOM, name=session.name)

    room_services.member_mute(
        member(bob), actor="admin:ops", reason="Posting the same alert every minute"
    )
    room_services.room_leave(carol, ROOM)
    room_services.member_remove(
        member(dave), actor="admin:ops", reason="Ran an unreviewed migration in the channel"
    )
    acme.refresh_from_db()
    mailbox_services.optin_revoke(acme, source=partner, actor="admin:ops")
    OptInFactory(project=vendor, source=partner, created_by="cli:root")
    return {"room": member(alice).room}


@pytest.fixture
def phone_or_laptop(browser: Browser, live_server, request) -> Iterator[Page]:
    context = browser.new_context(
        base_url=live_server.url,
        viewport={"width": request.param, "height": 900},
        locale="en-US",
    )
    context.set_default_timeout(15_000)
    yield context.new_page()
    context.close()


def _pages(busy_admin: dict) -> list[tuple[str, str]]:
    room = busy_admin["room"].pk
    return [
        ("home", "/admin/"),
        ("sessions", "/admin/mailbox/session/"),
        ("keys", "/admin/mailbox/projectkey/"),
        ("audit", "/admin/mailbox/auditrecord/"),
        ("room", f"/admin/rooms/room/{room}/change/"),
        ("transcript", f"/admin/rooms/room/{room}/transcript/"),
    ]


@pytest.mark.parametrize("phone_or_laptop", WIDTHS, indirect=True, ids=lambda w: f"{w}px")
def test_admin_pages_fit_the_screen(phone_or_laptop: Page, busy_admin):
    page = phone_or_laptop
    width = page.viewport_size["width"]
    log_in(page, "ops")
    problems = []
    for name, path in _pages(busy_admin):
        page.goto(path)
        found = page.evaluate(HEADERS_JS)
        screenshot(page, f"{name}-{width}")
        if found["pageWidth"] > found["viewport"]:
            problems.append(f"{name}: the page is {found['pageWidth']} px wide")
        if found["beyond"]:
            problems.append(f"{name}: columns out of reach: {found['beyond']}")
        # Scrolling inside a table would be the last resort; none of these needs it.
        if found["scrolled"]:
            problems.append(f"{name}: columns cut off, behind a scroll: {found['scrolled']}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("phone_or_laptop", WIDTHS, indirect=True, ids=lambda w: f"{w}px")
def test_admin_times_carry_their_zone(phone_or_laptop: Page, busy_admin):
    page = phone_or_laptop
    log_in(page, "ops")
    zoneless = {}
    for name, path in _pages(busy_admin):
        page.goto(path)
        text = page.locator("#content").inner_text()
        found = [m.group(0) for m in TIME_OF_DAY.finditer(text)]
        if found:
            zoneless[name] = sorted(set(found))
    assert not zoneless, zoneless


def test_the_keys_list_says_active_or_revoked_in_words(page: Page, busy_admin):
    log_in(page, "ops")
    page.goto("/admin/mailbox/projectkey/")
    statuses = page.locator("#result_list td.field-status")
    expect(statuses.locator("img")).to_have_count(0)
    texts = [" ".join(t.split()) for t in statuses.all_inner_texts()]
    active = [t for t in texts if t.startswith("active")]
    revoked = [t for t in texts if not t.startswith("active")]
    assert len(revoked) == 2, texts
    assert all(re.fullmatch(r"active (never used|used [-\d]+ [:\d]+ UTC)", t) for t in active)
    assert all(re.fullmatch(r"revoked \d{4}-\d\d-\d\d \d\d:\d\d UTC", t) for t in revoked)
    expect(statuses.locator(".plumb-badge-ok")).to_have_count(len(active))
    expect(statuses.locator(".plumb-badge-danger")).to_have_text(["revoked", "revoked"])


def test_the_home_page_keeps_the_full_app_list_folded(page: Page, busy_admin):
    log_in(page, "ops")
    folded = page.locator("details.plumb-all-models")
    expect(folded).to_have_count(1)
    expect(folded).not_to_have_attribute("open", re.compile(".*"))
    expect(folded.locator("summary")).to_have_text("All models")
    expect(page.locator("#content-main .app-mailbox")).to_be_hidden()
    folded.locator("summary").click()
    expect(page.locator("#content-main .app-mailbox")).to_be_visible()
