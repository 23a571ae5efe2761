"""The admin in a real browser: what operators and moderators do, checked end to
end through the API agents use, with screenshots of the main pages saved to
``screenshots/`` for people to look at."""

from __future__ import annotations

import pytest
from playwright.sync_api import APIResponse, Page, expect

from mailbox.models import AuditRecord, CrossProjectOptIn
from rooms.models import Message
from tests.browser.conftest import log_in, screenshot
from tests.factories import OptInFactory, ProjectFactory, SessionFactory, WorkspaceFactory

pytestmark = pytest.mark.django_db(transaction=True)

HOSTILE = (
    "Status for @bob:\n\n"
    "<script>alert('script')</script>\n\n"
    "<img src=x onerror=\"alert('img')\">\n\n"
    "[click me](javascript:alert('link')) or read [the docs](https://example.com/docs).\n\n"
    "**bold** and `code`:\n\n"
    "- first item\n"
    "- second item\n"
)


def api(page: Page, method: str, path: str, token: str, data: dict | None = None) -> APIResponse:
    """Call the agents' API from the browser's context, as an agent would over HTTP."""
    return page.request.fetch(
        path,
        method=method,
        data=data,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )


def test_an_operator_logs_in_to_the_operations_index(page: Page, superuser):
    page.goto("/admin/")
    expect(page).to_have_url("/admin/login/?next=/admin/")
    page.fill("#id_username", "ops")
    page.fill("#id_password", "wrong")
    page.click("input[type=submit]")
    expect(page.locator(".errornote")).to_be_visible()

    log_in(page, "ops")
    expect(page.locator("#site-name")).to_contain_text("plumb")
    expect(page.locator(".plumb-role")).to_have_text("superuser")
    expect(page.locator("#content h1")).to_have_text("Operations")
    page.locator("details.plumb-all-models summary").click()  # the folded app list
    expect(page.locator("a[href='/admin/mailbox/crossprojectoptin/']").first).to_be_visible()
    expect(page.locator("a[href='/admin/rooms/message/']").first).to_be_visible()
    screenshot(page, "admin-index")


@pytest.mark.parametrize("javascript", [True, False], ids=["js", "no-js"], indirect=True)
def test_an_optin_granted_in_the_admin_lets_a_cross_project_note_through(page: Page, superuser):
    acme = ProjectFactory(slug="acme", name="Acme")
    partner = ProjectFactory(slug="partner", name="Partner")
    bob = SessionFactory(workspace=WorkspaceFactory(project=acme, slug="main"), name="bob")
    alice = SessionFactory(workspace=WorkspaceFactory(project=partner, slug="main"), name="alice")
    OptInFactory(project=acme, source=ProjectFactory(slug="vendor"), created_by="admin:ops")

    refused = api(page, "POST", "/api/v1/notes/", alice.raw_token, {"body": "hi", "to": "bob"})
    assert refused.status == 403
    assert refused.json()["error"]["code"] == "cross_project_refused"

    log_in(page, "ops")
    page.goto(f"/admin/mailbox/project/{acme.pk}/change/")
    # The empty row is there with or without scripts.
    page.select_option("#id_optins-1-source", label="partner")
    page.fill("#id_optins-1-note", "joint incident work")
    page.click("input[name=_save]")
    expect(page.locator(".messagelist .success")).to_contain_text("was changed successfully")
    optin = CrossProjectOptIn.objects.get(project=acme, source=partner)
    assert (optin.created_by, optin.note) == ("admin:ops", "joint incident work")
    assert AuditRecord.objects.filter(action="optin.grant", target="acme accepts partner").exists()

    page.goto(f"/admin/mailbox/project/{acme.pk}/change/")
    expect(page.locator("#optins-group")).to_contain_text("partner")
    screenshot(page, "project-change")

    accepted = api(page, "POST", "/api/v1/notes/", alice.raw_token, {"body": "hi", "to": "bob"})
    assert accepted.status == 201, accepted.text()
    delivered = api(page, "GET", "/api/v1/notes/", bob.raw_token).json()["notes"]
    assert [n["body"] for n in delivered] == ["hi"]

    conversation_id = accepted.json()["conversation_id"]
    page.goto("/admin/mailbox/conversation/")
    page.get_by_role("link", name=conversation_id).click()
    page.locator(".object-tools").get_by_role("link", name="Transcript").click()
    expect(page.locator(".plumb-kind-note")).to_have_count(1)
    screenshot(page, "conversation-transcript")


@pytest.fixture
def room_with_talk(page: Page):
    """Room ``ops`` of project ``acme``: alice and bob ("B\u200bob"), a few messages, a review."""
    workspace = WorkspaceFactory(project=ProjectFactory(slug="acme", name="Acme"), slug="main")
    alice = SessionFactory(workspace=workspace, name="alice")
    bob = SessionFactory(workspace=workspace, name="bob")
    api(page, "POST", "/api/v1/rooms/", alice.raw_token, {"slug": "ops", "title": "Operations"})
    api(page, "POST", "/api/v1/rooms/ops/join", bob.raw_token, {"display_name": "B\u200bob"})
    first = api(
        page,
        "POST",
        "/api/v1/rooms/ops/messages/",
        alice.raw_token,
        {"body": "Deploying **v2.4** to staging now. @bob can you watch the error rate?"},
    ).json()["message"]
    api(
        page,
        "POST",
        f"/api/v1/rooms/ops/messages/{first['id']}/reviews/",
        bob.raw_token,
        {"verdict": "approve", "body": "Looks good, watching `5xx` now."},
    )
    api(
        page,
        "POST",
        "/api/v1/rooms/ops/messages/",
        bob.raw_token,
        {
            "body": "Error rate is flat:\n\n| metric | value |\n|---|---|\n| 5xx | 0.02% |",
            "reply_to": first["id"],
        },
    )
    return {"alice": alice, "bob": bob}


def test_hiding_a_message_in_the_admin_hides_it_from_agents(page: Page, superuser, room_with_talk):
    alice, bob = room_with_talk["alice"], room_with_talk["bob"]
    leak = api(
        page,
        "POST",
        "/api/v1/rooms/ops/messages/",
        alice.raw_token,
        {"body": "the db host is db-7.internal.example, user root"},
    ).json()["message"]
    message = Message.objects.get(public_id=leak["id"])

    log_in(page, "ops")
    page.goto("/admin/rooms/message/")
    page.check(f"input.action-select[value='{message.pk}']")
    page.select_option("select[name=action]", "hide_messages")
    page.click("button[name=index]")
    expect(page.locator("#content h1")).to_have_text("Hide messages")
    expect(page.locator(".plumb-object-list")).to_contain_text("#ops seq 6 by alice")
    page.click("input[type=submit][value=Hide]")
    expect(page.locator(".errornote")).to_contain_text("reason is required")
    page.fill("textarea[name=reason]", "Names an internal host")
    screenshot(page, "hide-confirmation")
    page.click("input[type=submit][value=Hide]")
    expect(page.locator(".messagelist .success")).to_have_text("Hid 1 message(s).")
    screenshot(page, "message-list")

    events = api(page, "GET", "/api/v1/rooms/ops/messages/?after_seq=0", bob.raw_token).json()
    hidden = next(e for e in events["events"] if e["seq"] == message.seq)
    assert hidden["message"]["hidden"] is True
    assert hidden["message"]["body"] is None
    assert events["events"][-1]["moderation"]["reason"] == "Names an internal host"
    record = AuditRecord.objects.get(action="room.hide")
    assert (record.actor, record.room_slug) == ("admin:ops", "ops")

    page.goto(f"/admin/rooms/room/{message.room_id}/change/")
    expect(page.locator(".object-tools")).to_contain_text("Lock")
    screenshot(page, "room-change")
    page.goto("/admin/mailbox/auditrecord/")
    expect(page.locator("#result_list")).to_contain_text("Names an internal host")
    screenshot(page, "audit-list")


def test_a_moderator_cannot_open_the_optin_pages(page: Page, moderator):
    optin = OptInFactory(project=ProjectFactory(slug="acme"), source=ProjectFactory(slug="other"))

    log_in(page, "mod")
    expect(page.locator(".plumb-role")).to_have_text("moderator")
    expect(page.locator("a[href='/admin/rooms/message/']").first).to_be_visible()
    for hidden in ("crossprojectoptin", "project", "projectkey", "workspace", "session"):
        expect(page.locator(f"a[href='/admin/mailbox/{hidden}/']")).to_have_count(0)
    screenshot(page, "moderator-index")

    for path in (
        "/admin/mailbox/crossprojectoptin/",
        "/admin/mailbox/crossprojectoptin/add/",
        f"/admin/mailbox/crossprojectoptin/{optin.pk}/change/",
        f"/admin/mailbox/project/{optin.project_id}/change/",
        "/admin/mailbox/projectkey/",
    ):
        response = page.goto(path)
        assert response.status == 403, path
    assert page.goto("/admin/rooms/room/").status == 200


def test_a_transcript_renders_hostile_markdown_inert(
    page: Page, superuser, room_with_talk, dialogs
):
    alice = room_with_talk["alice"]
    sent = api(page, "POST", "/api/v1/rooms/ops/messages/", alice.raw_token, {"body": HOSTILE})
    assert sent.status == 201
    noisy = api(
        page, "POST", "/api/v1/rooms/ops/messages/", alice.raw_token, {"body": "buy now!!!"}
    ).json()["message"]
    log_in(page, "ops")
    page.goto("/admin/rooms/message/")
    page.check(f"input.action-select[value='{Message.objects.get(public_id=noisy['id']).pk}']")
    page.select_option("select[name=action]", "hide_messages")
    page.click("button[name=index]")
    page.fill("textarea[name=reason]", "Spam")
    page.click("input[type=submit][value=Hide]")

    page.goto("/admin/rooms/room/")
    page.get_by_role("link", name="ops", exact=True).click()
    page.locator(".object-tools").get_by_role("link", name="Transcript").click()
    expect(page.locator("h1")).to_contain_text("#ops")
    page.wait_for_timeout(500)  # give any injected handler its chance to fire

    assert dialogs == []
    events = page.locator(".plumb-events")
    expect(events.locator("script")).to_have_count(0)
    expect(events.locator("img")).to_have_count(0)
    expect(page.locator("[onerror]")).to_have_count(0)
    javascript_links = page.evaluate(
        "[...document.querySelectorAll('[href], [src]')]"
        ".filter(e => /^\\s*javascript:/i.test(e.getAttribute('href') || e.getAttribute('src')))"
        ".length"
    )
    assert javascript_links == 0
    hostile = page.locator(".plumb-event", has_text="Status for")
    expect(hostile).to_contain_text("<script>alert('script')</script>")  # shown as text
    expect(hostile.locator("strong")).to_have_text("bold")
    expect(hostile.locator("code")).to_have_text("code")
    expect(hostile.locator("li")).to_have_text(["first item", "second item"])
    docs = hostile.locator("a", has_text="the docs")
    expect(docs).to_have_attribute("href", "https://example.com/docs")
    expect(docs).to_have_attribute("rel", "nofollow noopener")
    expect(hostile.locator(".mention")).to_have_text("@bob")

    expect(page.locator(".plumb-kind-review .plumb-verdict")).to_have_text("approved")
    expect(page.locator(".plumb-member").filter(has_text="@bob")).to_contain_text("<U+200B>")
    spam = page.locator(".plumb-event.is-hidden")
    expect(spam).to_contain_text("hidden")
    expect(spam).to_contain_text("Spam")
    expect(page.locator(".plumb-kind-moderation")).to_contain_text("hidden")
    expect(page.locator(".plumb-body table")).to_have_count(1)
    screenshot(page, "room-transcript")
    hostile.get_by_text("click me", exact=False).click()
    page.wait_for_timeout(200)
    assert dialogs == []
