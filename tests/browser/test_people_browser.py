"""A person in the conversation, in a real browser (issue 28's acceptance): a
participant logs in, answers a note from an agent, posts in a room while an agent
waits for it, reviews a message, and watches their unread count fall as they read;
with scripts and without. They get 403 on what they may not run. The transcript,
the inbox and a thread are photographed at 1280 px and 390 px
(``$PLUMB_SCREENSHOTS``).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest
from playwright.sync_api import Page, expect

from mailbox import wakeups
from mailbox.models import Person
from rooms.models import Event, Message, Room
from tests.browser.conftest import log_in, screenshot
from tests.browser.test_admin_browser import api
from tests.factories import ProjectFactory, SessionFactory, WorkspaceFactory

pytestmark = pytest.mark.django_db(transaction=True)

WIDTHS = (1280, 390)


@pytest.fixture
def agents(page: Page, participant) -> dict:
    """alice and bob of project acme, and zed of project far (no opt-in anywhere);
    room ``ops``: alice asks, bob answers."""
    main = WorkspaceFactory(project=ProjectFactory(slug="acme", name="Acme"), slug="main")
    alice = SessionFactory(workspace=main, name="alice")
    bob = SessionFactory(workspace=main, name="bob")
    far = WorkspaceFactory(project=ProjectFactory(slug="far", name="Far"), slug="main")
    zed = SessionFactory(workspace=far, name="zed")
    api(page, "POST", "/api/v1/rooms/", alice.raw_token, {"slug": "ops", "title": "Operations"})
    api(page, "POST", "/api/v1/rooms/ops/join", bob.raw_token, {"display_name": "Bob"})
    api(
        page,
        "POST",
        "/api/v1/rooms/ops/messages/",
        alice.raw_token,
        {"body": "Who owns `parser.py` now, **bob** or me? The refactor touches both."},
    )
    api(
        page,
        "POST",
        "/api/v1/rooms/ops/messages/",
        bob.raw_token,
        {"body": "I thought you did. Let's ask a human."},
    )
    return {"alice": alice, "bob": bob, "zed": zed}


def unread(page: Page):
    return page.locator("#user-tools [data-plumb-unread]")


def shoot(page: Page, name: str) -> None:
    """The page at each width, then back to the laptop's."""
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        screenshot(page, f"people-{name}-{width}")
    page.set_viewport_size({"width": 1280, "height": 900})


class LongPoll(threading.Thread):
    """An agent's ``read_messages?wait``, over HTTP, in a thread of its own."""

    def __init__(self, base_url: str, token: str, path: str) -> None:
        super().__init__(daemon=True)
        self.request = urllib.request.Request(
            base_url + path, headers={"Authorization": f"Bearer {token}"}
        )
        self.answer: dict | None = None
        self.answered_at = 0.0

    def run(self) -> None:
        with urllib.request.urlopen(self.request, timeout=30) as response:
            self.answer = json.loads(response.read())
        self.answered_at = time.monotonic()


@pytest.mark.parametrize("javascript", [True, False], ids=["js", "no-js"], indirect=True)
def test_a_participant_takes_part_from_the_admin(page: Page, agents, live_server, javascript: bool):
    alice, bob, zed = agents["alice"], agents["bob"], agents["zed"]
    page.set_viewport_size({"width": 1280, "height": 900})
    log_in(page, "ada")
    expect(page.locator(".plumb-role")).to_have_text("participant")
    page.get_by_role("link", name="Inbox").first.click()
    expect(page.locator("h1")).to_contain_text("@ada")  # the username became the handle

    # Two agents, one of another project with no opt-in, leave notes to the person.
    asked = api(page, "POST", "/api/v1/notes/", alice.raw_token, {
        "to": "ada", "body": "Can you settle who owns `parser.py`? bob and I both touch it.",
    })  # fmt: skip
    assert asked.status == 201, asked.text()
    assert asked.json()["delivery"] == "name"
    far = api(page, "POST", "/api/v1/notes/", zed.raw_token, {
        "to": "ada", "body": "FYI: the far project's nightly build is red again.",
    })  # fmt: skip
    assert far.status == 201, far.text()
    page.reload()
    expect(unread(page)).to_have_text("2")
    expect(page.locator("#plumb-threads .plumb-thread")).to_have_count(2)
    shoot(page, "inbox")

    # Opening alice's thread delivers her note; the count falls; alice sees a human got it.
    page.locator("#plumb-threads a", has_text="@alice").click()
    expect(page.locator(".plumb-kind-note.is-new")).to_contain_text("who owns")
    expect(unread(page)).to_have_text("1")
    sent = api(page, "GET", "/api/v1/notes/sent/", alice.raw_token).json()["sent"]
    assert sent[0]["state"] == "delivered"
    assert sent[0]["delivered_to"] == {"name": "ada", "kind": "human"}

    page.fill("#id_body", "You own `parser.py`; bob takes `lexer.py`. Ping me if it gets hairy.")
    page.click("input[type=submit][value='Send answer']")
    expect(page.locator(".plumb-kind-note")).to_have_count(2)
    shoot(page, "thread")
    notes = api(page, "GET", "/api/v1/notes/", alice.raw_token).json()["notes"]
    assert [n["body"] for n in notes] == [
        "You own `parser.py`; bob takes `lexer.py`. Ping me if it gets hairy."
    ]
    assert notes[0]["from"]["kind"] == "human"

    # bob waits for the next message in ops; the person's post wakes him.
    room = Room.objects.get(slug="ops")
    poll = LongPoll(
        live_server.url,
        bob.raw_token,
        f"/api/v1/rooms/ops/messages/?after_seq={room.head_seq}&kinds=message&wait=25",
    )
    poll.start()
    deadline = time.monotonic() + 10
    while wakeups.waiting_polls() < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert wakeups.waiting_polls() == 1

    page.goto(f"/admin/rooms/room/{room.pk}/transcript/")
    expect(page.locator("#compose")).to_contain_text("Post as @ada")
    page.fill("#id_body", "Settled: **alice** owns `parser.py`, @bob takes `lexer.py`.")
    posted_at = time.monotonic()
    page.click("#compose input[type=submit]")
    poll.join(15)
    assert poll.answer is not None
    posted = poll.answer["events"][-1]["message"]
    assert posted["author"] == {
        "handle": "ada",
        "display_name": "Ada Lovelace",
        "display_name_visible": "Ada Lovelace",
        "kind": "human",
    }
    assert [m["handle"] for m in posted["mentions"]] == ["bob"]
    print(f"bob's wait answered {(poll.answered_at - posted_at) * 1000:.0f} ms after the click")
    mine = page.locator(".plumb-kind-message", has_text="Settled:")
    expect(mine.locator(".plumb-badge-person")).to_have_text("person")

    # A review button on alice's question.
    question = page.locator(".plumb-kind-message", has_text="Who owns")
    question.get_by_role("button", name="Approve").click()
    expect(page.locator(".plumb-kind-review").last).to_contain_text("approved")
    review = Event.objects.filter(room=room, kind="review").get()
    assert (review.actor.handle, review.verdict) == ("ada", "approve")

    # alice mentions the person, who is a member now: the count grows, then falls.
    thanks = api(page, "POST", "/api/v1/rooms/ops/messages/", alice.raw_token, {
        "body": "Thanks @ada, on it.",
    })  # fmt: skip
    assert thanks.json()["mentions"][0]["handle"] == "ada"
    if javascript:
        # The page refreshes itself: the message and the count arrive unasked.
        refreshed = page.locator(".plumb-kind-message", has_text="Thanks")
        expect(refreshed).to_be_visible(timeout=15_000)
        expect(unread(page)).to_have_text("2", timeout=15_000)
    else:
        page.reload()
        expect(unread(page)).to_have_text("2")
    shoot(page, "transcript")
    page.get_by_role("link", name="Inbox").first.click()
    expect(page.locator("#plumb-mentions")).to_contain_text("Thanks @ada, on it.")
    shoot(page, "inbox-mentions")
    page.locator("#plumb-threads a", has_text="@zed").click()
    expect(unread(page)).to_be_hidden()  # nothing left: the note read, the mention shown
    assert Person.objects.get().name.handle == "ada"
    assert Message.objects.filter(author__handle="ada").count() == 1


@pytest.mark.parametrize("javascript", [True, False], ids=["js", "no-js"], indirect=True)
def test_a_compose_form_sent_twice_posts_once(page: Page, agents):
    room = Room.objects.get(slug="ops")
    log_in(page, "ada")
    page.goto(f"/admin/rooms/room/{room.pk}/transcript/")
    page.fill("#id_body", "Sent once, however often it is clicked.")
    form = page.locator("#compose form")
    # Two submissions of the same rendered form, as a double click or a reload sends.
    data = {
        name: form.locator(f"[name={name}]").first.get_attribute("value") or ""
        for name in ("csrfmiddlewaretoken", "idempotency_key", "after_seq", "talk")
    }
    data["body"] = "Sent once, however often it is clicked."
    for _ in range(2):
        answer = page.request.post(
            f"/admin/rooms/room/{room.pk}/transcript/",
            form=data,
            headers={"Referer": page.url},
            max_redirects=0,
        )
        assert answer.status == 302
    assert Message.objects.filter(author__handle="ada").count() == 1


def test_a_participant_gets_403_on_what_they_may_not_run(page: Page, agents):
    log_in(page, "ada")
    for path in (
        "/admin/mailbox/project/",
        "/admin/mailbox/projectkey/",
        "/admin/mailbox/crossprojectoptin/",
        "/admin/mailbox/conversation/",
    ):
        assert page.goto(path).status == 403, path
    message = Message.objects.first()
    page.goto("/admin/rooms/message/")
    expect(page.locator("select[name=action]")).to_have_count(0)  # no moderation menu
    token = page.locator("input[name=csrfmiddlewaretoken]").first.get_attribute("value")
    refused = page.request.post(
        "/admin/rooms/message/",
        form={
            "csrfmiddlewaretoken": token or page.context.cookies()[0]["value"],
            "action": "hide_messages",
            "_selected_action": str(message.pk),
            "index": "0",
        },
        headers={"Referer": page.url},
    )
    assert refused.status == 403
    assert not Event.objects.filter(kind="moderation").exists()
