"""The rooms' admin: moderation actions ask for a reason, run the moderation
services (stream event and audit record), and agents feel the effect over the
API; transcripts render markdown inertly; changelists stay cheap with many rows.
"""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Group
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from common.admin import paging
from common.admin.actions import CONFIRM_FIELD, NEXT_FIELD
from common.markdown import RenderBudget
from mailbox import services as mailbox_services
from mailbox.models import AgentName, AuditRecord, Workspace
from rooms import services, transcripts
from rooms.models import Event, Member, Message, Room
from tests.conftest import client_for
from tests.factories import ProjectFactory, SessionFactory, WorkspaceFactory

pytestmark = pytest.mark.django_db

MODELS = ["room", "member", "message", "event"]


def url(model: str, view: str, *args: object) -> str:
    return reverse(f"admin:rooms_{model}_{view}", args=args)


def html(response) -> str:
    return response.content.decode()


@pytest.fixture
def bob(workspace):
    return SessionFactory(workspace=workspace, name="bob")


@pytest.fixture
def bob_client(bob):
    return client_for(bob)


@pytest.fixture
def room(agent_session, session_client, bob, bob_client):
    """Room ``ops``: seq 1 alice creates it, 2 bob joins, 3 alice's message, 4 bob approves."""
    session_client.post("/api/v1/rooms/", {"slug": "ops", "title": "Operations"}, format="json")
    bob_client.post("/api/v1/rooms/ops/join", {"display_name": "Bob"}, format="json")
    sent = session_client.post(
        "/api/v1/rooms/ops/messages/", {"body": "deploying now, @bob"}, format="json"
    )
    bob_client.post(
        f"/api/v1/rooms/ops/messages/{sent.json()['message']['id']}/reviews/",
        {"verdict": "approve", "body": "ship it"},
        format="json",
    )
    return Room.objects.get(slug="ops")


@pytest.fixture
def message(room):
    return Message.objects.get(room=room)


@pytest.fixture
def bob_member(room):
    return Member.objects.get(room=room, name__handle="bob")


@pytest.fixture
def moderator(db, django_user_model):
    """A staff user in the ``moderators`` group the data migration created; not a superuser."""
    user = django_user_model.objects.create_user("mod", password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name="moderators"))
    return user


@pytest.fixture
def moderator_client(client, moderator):
    client.force_login(moderator)
    return client


def run_action(client, model: str, action: str, objects, reason: str | None, **extra):
    """The two POSTs of a reason action: the menu's, then the confirmation's."""
    selected = [str(obj.pk) for obj in objects]
    first = client.post(
        url(model, "changelist"),
        {"action": action, "_selected_action": selected, "index": "0", **extra},
    )
    assert first.status_code == 200
    assert "admin/plumb/reason_confirmation.html" in [t.name for t in first.templates]
    data = {"action": action, "_selected_action": selected, CONFIRM_FIELD: "yes", **extra}
    if reason is not None:
        data["reason"] = reason
    return client.post(url(model, "changelist"), data)


def api_events(client) -> list[dict]:
    return client.get("/api/v1/rooms/ops/messages/?after_seq=0&limit=500").json()["events"]


# --- every page renders ---------------------------------------------------------------


@pytest.mark.parametrize("model", MODELS)
def test_every_changelist_and_change_page_renders(admin_client, room, model):
    obj = {
        "room": room,
        "member": Member.objects.filter(room=room).first(),
        "message": Message.objects.filter(room=room).first(),
        "event": Event.objects.filter(room=room).last(),
    }[model]
    changelist = admin_client.get(url(model, "changelist"))
    assert changelist.status_code == 200
    assert len(changelist.context["cl"].result_list) >= 1
    assert admin_client.get(url(model, "change", obj.pk)).status_code == 200


@pytest.mark.parametrize("model", MODELS)
def test_nothing_is_added_or_deleted_and_object_pages_are_view_only(admin_client, room, model):
    obj = {
        "room": room,
        "member": Member.objects.filter(room=room).first(),
        "message": Message.objects.filter(room=room).first(),
        "event": Event.objects.filter(room=room).first(),
    }[model]
    events_before = Event.objects.count()
    assert admin_client.get(url(model, "add")).status_code == 403
    assert admin_client.post(url(model, "delete", obj.pk), {"post": "yes"}).status_code == 403
    assert admin_client.post(url(model, "change", obj.pk), {}).status_code == 403
    action_form = admin_client.get(url(model, "changelist")).context["action_form"]
    if action_form is not None:  # events have no actions at all
        assert "delete_selected" not in dict(action_form.fields["action"].choices)
    assert Event.objects.count() == events_before


def test_room_changelist_shows_latest_seq_members_and_lock_state(admin_client, room):
    services.room_lock(room, actor="admin:x", reason="incident")
    response = admin_client.get(url("room", "changelist"))
    listed = response.context["cl"].result_list[0]
    assert (listed.slug, listed.head_seq, listed.current_members) == ("ops", 5, 2)
    assert listed.locked
    assert "Operations" in html(response)


def test_member_display_names_show_invisible_characters(admin_client, room, bob_member):
    Member.objects.filter(pk=bob_member.pk).update(display_name="Bo\u200bb\u202e")
    body = html(admin_client.get(url("member", "changelist")))
    assert "Bo<span" in body
    assert "&lt;U+200B&gt;" in body
    assert "&lt;U+202E&gt;" in body
    assert "\u200b" not in body
    assert "\u202e" not in body


def member_rows(page: str) -> dict[str, str]:
    """The members inline of a room page: each handle's row, as text (without the
    row's object name, which the page's style hides)."""
    inline = re.search(r'id="members-group".*?</table>', page, re.S).group(0)
    rows = re.findall(r"<tr[^>]*has_original[^>]*>(.*?)</tr>", inline, re.S)
    texts = []
    for row in rows:
        row = re.sub(r'<td class="original">.*?</td>', "", row, flags=re.S)
        text = re.sub(r"<[^>]+>", " ", row).replace("&mdash;", "—").replace("&nbsp;", " ")
        texts.append(" ".join(text.split()))
    return {text.split()[0]: text for text in texts}


def test_a_member_removed_by_an_optin_revocation_is_removed_on_both_room_pages(
    admin_client, room, bob, bob_client
):
    """The room page and the transcript read the same event: "removed — opt-in revoked"."""
    partner = SessionFactory(
        workspace=WorkspaceFactory(project=ProjectFactory(slug="partner"), slug="main"),
        name="carol",
    )
    mailbox_services.optin_grant(room.project, source=partner.workspace.project, created_by="t")
    assert client_for(partner).post("/api/v1/rooms/ops/join", format="json").status_code == 201
    bob_client.post("/api/v1/rooms/ops/leave", format="json")
    mailbox_services.optin_revoke(room.project, source=partner.workspace.project, actor="admin:x")

    rows = member_rows(html(admin_client.get(url("room", "change", room.pk))))
    transcript = html(admin_client.get(url("room", "transcript", room.pk)))

    assert rows["carol"].startswith("carol removed — opt-in revoked ")
    assert "UTC" in rows["carol"]
    assert "left" not in rows["carol"]
    assert re.search(
        r"@carol removed</strong>\s*<span class=\"plumb-reason\">&mdash; opt-in revoked<",
        transcript,
    )
    assert rows["bob"].startswith("bob Bob left ")
    assert rows["alice"].split()[:2] == ["alice", "member"]
    members = html(admin_client.get(url("member", "changelist"), {"room": "ops"}))
    assert "opt-in revoked" in members


def test_room_change_page_links_to_transcript_and_filtered_lists(admin_client, room):
    body = html(admin_client.get(url("room", "change", room.pk)))
    assert url("room", "transcript", room.pk) in body
    assert f"{url('message', 'changelist')}?room=ops" in body
    assert f"{reverse('admin:mailbox_auditrecord_changelist')}?room_slug=ops" in body
    filtered = admin_client.get(url("event", "changelist"), {"room": "ops"})
    assert {e.room_id for e in filtered.context["cl"].result_list} == {room.pk}
    assert 'name="room" value="ops"' in html(filtered)


def test_message_search_finds_by_body_and_author(admin_client, room):
    by_body = admin_client.get(url("message", "changelist"), {"q": "deploying"})
    assert [m.seq for m in by_body.context["cl"].result_list] == [3]
    by_author = admin_client.get(url("message", "changelist"), {"q": "nobody-like-this"})
    assert list(by_author.context["cl"].result_list) == []


# --- moderation actions ---------------------------------------------------------------


def test_hide_action_asks_for_a_reason_first_and_changes_nothing_until_confirmed(
    admin_client, message
):
    response = admin_client.post(
        url("message", "changelist"),
        {"action": "hide_messages", "_selected_action": [str(message.pk)], "index": "0"},
    )
    assert response.status_code == 200
    body = html(response)
    assert 'name="reason"' in body
    assert "#ops seq 3 by alice: deploying now, @bob" in body
    assert 'name="_plumb_reason_confirm"' in body
    message.refresh_from_db()
    assert not message.hidden
    assert not AuditRecord.objects.filter(action="room.hide").exists()


@pytest.mark.parametrize("reason", [None, "", "   "])
def test_hide_action_without_a_reason_is_refused_on_the_form(admin_client, message, reason):
    response = run_action(admin_client, "message", "hide_messages", [message], reason)
    assert response.status_code == 200
    assert response.context["form"].errors["reason"]
    assert "the reason is required" in html(response)
    message.refresh_from_db()
    assert not message.hidden
    assert not AuditRecord.objects.filter(action="room.hide").exists()


def test_hide_action_hides_from_agents_with_an_event_and_an_audit_record(
    admin_client, admin_user, message, session_client, bob_client
):
    response = run_action(
        admin_client, "message", "hide_messages", [message], "  leaked a hostname  "
    )
    assert response.status_code == 302
    assert response["Location"] == url("message", "changelist")

    message.refresh_from_db()
    assert message.hidden
    assert message.hidden_reason == "leaked a hostname"
    record = AuditRecord.objects.get(action="room.hide")
    assert record.actor == f"admin:{admin_user.get_username()}" == "admin:admin"
    assert (record.room_slug, record.project_slug) == ("ops", message.room.project.slug)
    assert record.reason == "leaked a hostname"
    assert message.public_id in record.target

    for client in (session_client, bob_client):
        events = api_events(client)
        shown = next(e for e in events if e["kind"] == "message")
        assert shown["message"]["hidden"] is True
        assert shown["message"]["body"] is None
        assert events[-1]["moderation"] == {
            "action": "hide",
            "reason": "leaked a hostname",
            "message_id": message.public_id,
            "member": None,
        }
    single = session_client.get("/api/v1/rooms/ops/messages/?after_seq=2&limit=1").json()
    assert single["events"][0]["message"]["body"] is None


def test_hide_action_reports_how_many_changed(admin_client, room, message, session_client):
    other = session_client.post(
        "/api/v1/rooms/ops/messages/", {"body": "second"}, format="json"
    ).json()["message"]
    services.message_hide(message, actor="admin:x", reason="earlier")
    second = Message.objects.get(public_id=other["id"])

    response = run_action(admin_client, "message", "hide_messages", [message, second], "spam")
    texts = [str(m) for m in response.wsgi_request._messages]
    assert texts == [
        "Hid 1 message(s).",
        "1 message(s) were hidden already and were left as they were.",
    ]
    assert AuditRecord.objects.filter(action="room.hide").count() == 2


def test_unhide_action_serves_the_body_again_without_a_reason(
    admin_client, message, session_client
):
    services.message_hide(message, actor="admin:x", reason="check")
    response = run_action(admin_client, "message", "unhide_messages", [message], "")
    assert response.status_code == 302
    shown = next(e for e in api_events(session_client) if e["kind"] == "message")
    assert shown["message"]["body"] == "deploying now, @bob"
    record = AuditRecord.objects.get(action="room.unhide")
    assert (record.actor, record.reason) == ("admin:admin", "")


def test_mute_and_unmute_actions(admin_client, room, bob_member, bob_client):
    response = run_action(admin_client, "member", "mute_members", [bob_member], "spamming")
    assert response.status_code == 302
    refused = bob_client.post("/api/v1/rooms/ops/messages/", {"body": "hi"}, format="json")
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "member_muted"
    assert api_events(bob_client)[-1]["moderation"]["member"] == "bob"

    run_action(admin_client, "member", "unmute_members", [bob_member], "")
    sent = bob_client.post("/api/v1/rooms/ops/messages/", {"body": "hi"}, format="json")
    assert sent.status_code == 201
    records = AuditRecord.objects.filter(room_slug="ops").order_by("id")
    assert [(r.action, r.actor, r.target) for r in records] == [
        ("room.mute", "admin:admin", "member bob"),
        ("room.unmute", "admin:admin", "member bob"),
    ]


def test_remove_action_takes_the_member_out(admin_client, room, bob_member, session_client):
    response = run_action(admin_client, "member", "remove_members", [bob_member], "left team")
    assert response.status_code == 302
    members = session_client.get("/api/v1/rooms/ops/members/").json()["members"]
    assert [m["handle"] for m in members] == ["alice"]
    assert AuditRecord.objects.get(action="room.remove").reason == "left team"


def test_lock_and_unlock_actions(admin_client, room, session_client):
    response = run_action(admin_client, "room", "lock_rooms", [room], "incident review")
    assert response.status_code == 302
    refused = session_client.post("/api/v1/rooms/ops/messages/", {"body": "x"}, format="json")
    assert refused.status_code == 423
    assert refused.json()["error"]["code"] == "room_locked"
    assert session_client.get("/api/v1/rooms/ops/").json()["room"]["locked"] is True

    run_action(admin_client, "room", "unlock_rooms", [room], "resolved")
    sent = session_client.post("/api/v1/rooms/ops/messages/", {"body": "x"}, format="json")
    assert sent.status_code == 201
    assert list(
        AuditRecord.objects.filter(room_slug="ops").order_by("id").values_list("action", "reason")
    ) == [("room.lock", "incident review"), ("room.unlock", "resolved")]


def test_lock_action_needs_a_reason(admin_client, room):
    response = run_action(admin_client, "room", "lock_rooms", [room], "")
    assert response.status_code == 200
    room.refresh_from_db()
    assert not room.locked


def test_select_across_applies_to_every_filtered_row(admin_client, room, session_client):
    for n in range(3):
        session_client.post("/api/v1/rooms/ops/messages/", {"body": f"noise {n}"}, format="json")
    changelist = url("message", "changelist") + "?q=noise"
    first_page = [str(m.pk) for m in Message.objects.filter(body__startswith="noise")[:1]]
    first = admin_client.post(
        changelist,
        {
            "action": "hide_messages",
            "_selected_action": first_page,
            "select_across": "1",
            "index": "0",
        },
    )
    assert first.context["total"] == 3
    admin_client.post(
        changelist,
        {
            "action": "hide_messages",
            "_selected_action": first_page,
            "select_across": "1",
            CONFIRM_FIELD: "yes",
            "reason": "noise",
        },
    )
    assert set(Message.objects.filter(hidden_at__isnull=False).values_list("body", flat=True)) == {
        "noise 0",
        "noise 1",
        "noise 2",
    }


def test_change_page_buttons_reach_the_same_confirmation_and_come_back(admin_client, message):
    change_url = url("message", "change", message.pk)
    page = html(admin_client.get(change_url))
    assert 'value="hide_messages"' in page
    assert "unhide_messages" not in page

    data = {
        "action": "hide_messages",
        "_selected_action": [str(message.pk)],
        NEXT_FIELD: change_url,
    }
    confirmation = admin_client.post(url("message", "changelist"), data)
    assert confirmation.status_code == 200
    assert f'value="{change_url}"' in html(confirmation)
    done = admin_client.post(
        url("message", "changelist"), {**data, CONFIRM_FIELD: "yes", "reason": "off topic"}
    )
    assert done.status_code == 302
    assert done["Location"] == change_url
    assert 'value="unhide_messages"' in html(admin_client.get(change_url))


def test_an_outside_next_url_is_not_followed(admin_client, message):
    data = {
        "action": "hide_messages",
        "_selected_action": [str(message.pk)],
        NEXT_FIELD: "https://evil.example/",
        CONFIRM_FIELD: "yes",
        "reason": "x",
    }
    done = admin_client.post(url("message", "changelist"), data)
    assert done["Location"] == url("message", "changelist")


def test_member_and_room_change_pages_offer_the_actions_that_apply(admin_client, bob_member):
    page = html(admin_client.get(url("member", "change", bob_member.pk)))
    assert 'value="mute_members"' in page
    assert 'value="remove_members"' in page
    services.member_mute(bob_member, actor="a", reason="r")
    page = html(admin_client.get(url("member", "change", bob_member.pk)))
    assert 'value="unmute_members"' in page
    assert 'value="mute_members"' not in page
    room_page = html(admin_client.get(url("room", "change", bob_member.room_id)))
    assert 'value="lock_rooms"' in room_page


# --- roles ----------------------------------------------------------------------------


@pytest.mark.parametrize("model", MODELS)
def test_moderators_open_the_rooms_pages(moderator_client, room, model):
    assert moderator_client.get(url(model, "changelist")).status_code == 200
    obj = {"room": room, "member": Member.objects.first(), "message": Message.objects.first()}
    obj["event"] = Event.objects.first()
    assert moderator_client.get(url(model, "change", obj[model].pk)).status_code == 200


def test_moderators_run_moderation_actions_recorded_under_their_name(
    moderator_client, message, bob_member, session_client
):
    assert run_action(moderator_client, "message", "hide_messages", [message], "spam").status_code
    run_action(moderator_client, "member", "mute_members", [bob_member], "flood")
    run_action(moderator_client, "room", "lock_rooms", [message.room], "cool down")
    actions = AuditRecord.objects.filter(actor="admin:mod").values_list("action", flat=True)
    assert sorted(actions) == ["room.hide", "room.lock", "room.mute"]
    shown = next(e for e in api_events(session_client) if e["kind"] == "message")
    assert shown["message"]["hidden"] is True


def test_staff_without_the_group_cannot_moderate(client, django_user_model, message):
    client.force_login(django_user_model.objects.create_user("staff", is_staff=True))
    assert client.get(url("message", "changelist")).status_code == 403
    assert client.get(url("room", "transcript", message.room_id)).status_code == 403
    response = client.post(
        url("message", "changelist"),
        {
            "action": "hide_messages",
            "_selected_action": [str(message.pk)],
            CONFIRM_FIELD: "yes",
            "reason": "x",
        },
    )
    assert response.status_code == 403
    message.refresh_from_db()
    assert not message.hidden


# --- transcripts ----------------------------------------------------------------------


HOSTILE = (
    "<script>alert('x')</script>\n\n"
    "<img src=x onerror=alert(1)>\n\n"
    "[click me](javascript:alert(1)) and [ok](https://example.com/docs)\n\n"
    "**bold** and `code`\n\n- one\n- two\n"
)


def test_room_transcript_renders_markdown_inertly(admin_client, room, session_client):
    session_client.post("/api/v1/rooms/ops/messages/", {"body": HOSTILE}, format="json")
    response = admin_client.get(url("room", "transcript", room.pk))
    assert response.status_code == 200
    body = html(response)
    transcript = body[body.index('class="plumb-events"') :]
    assert "<script" not in transcript
    assert "&lt;script&gt;" in transcript
    assert "<img" not in transcript
    assert "javascript:" not in transcript.replace("[click me](javascript:alert(1))", "")
    assert not re.search(r"<[^>]+\bon\w+=", transcript)
    assert "<strong>bold</strong>" in transcript
    assert "<code>code</code>" in transcript
    assert "<li>one</li>" in transcript
    assert '<a href="https://example.com/docs" rel="nofollow noopener">ok</a>' in transcript


def test_room_transcript_shows_mentions_reviews_and_moderation(admin_client, room, message):
    services.message_hide(message, actor="admin:x", reason="leaked a hostname")
    services.member_mute(Member.objects.get(room=room, name__handle="bob"), actor="a", reason="r")
    body = html(admin_client.get(url("room", "transcript", room.pk)))
    assert '<span class="mention">@bob</span>' in body
    assert "approved" in body
    assert "ship it" in body
    assert "on seq 3" in body
    assert "message 3 hidden" in body
    assert "leaked a hostname" in body
    assert "@bob muted" in body
    # Staff see the hidden body, marked hidden with the reason.
    entry = body[body.index('id="seq-3"') :]
    entry = entry[: entry.index("</li>")]
    assert "is-hidden" in body
    assert "plumb-badge-danger" in entry
    assert ">hidden<" in entry
    assert "deploying now" in entry
    assert "leaked a hostname" in entry


def test_room_transcript_shows_invisible_characters_in_names(admin_client, room, bob_client):
    bob_client.post("/api/v1/rooms/ops/leave", {}, format="json")
    bob_client.post("/api/v1/rooms/ops/join", {"display_name": "B\u200bob\u202e"}, format="json")
    bob_client.post("/api/v1/rooms/ops/messages/", {"body": "hello"}, format="json")
    body = html(admin_client.get(url("room", "transcript", room.pk)))
    assert "&lt;U+200B&gt;" in body
    assert "&lt;U+202E&gt;" in body
    assert "\u200b" not in body
    assert "\u202e" not in body


def test_a_transcript_page_past_its_render_budget_shows_bodies_as_plain_text(
    admin_client, room, session_client, monkeypatch
):
    """16 KB of ``[`` take markdown-it-py about 0.45 s; a page of 200 would take
    minutes. Past the page's budget the rest are shown escaped, unrendered."""
    crafted = "[" * 16000
    for text in ["**n0**", "**n1**", "**n2**", crafted, "<b>late</b> **n4**"]:
        session_client.post("/api/v1/rooms/ops/messages/", {"body": text}, format="json")
    clock = iter(range(1000))  # each body "takes" one second of the page's budget
    monkeypatch.setattr(
        transcripts, "RenderBudget", lambda seconds: RenderBudget(3.5, clock=lambda: next(clock))
    )

    body = html(admin_client.get(url("room", "transcript", room.pk)))

    # The room's earlier bodies and n0..n2 share the four seconds; what comes after is text.
    assert "<strong>n0</strong>" in body
    assert '<pre class="plumb-unrendered" style="white-space: pre-wrap">' + crafted in body
    assert "&lt;b&gt;late&lt;/b&gt; **n4**" in body
    assert "<b>late</b>" not in body


def test_render_budget_renders_until_it_is_spent():
    ticks = iter([0.0, 0.4, 0.4, 0.9, 0.9, 1.2])
    budget = RenderBudget(1.0, clock=lambda: next(ticks))

    shown = [budget.render(f"*{n}*") for n in range(4)]

    assert shown[:3] == ["<p><em>0</em></p>\n", "<p><em>1</em></p>\n", "<p><em>2</em></p>\n"]
    assert budget.exhausted
    assert shown[3] == '<pre class="plumb-unrendered" style="white-space: pre-wrap">*3*</pre>'


def test_room_transcript_is_paginated_by_seq(admin_client, room, session_client):
    for n in range(6):
        session_client.post("/api/v1/rooms/ops/messages/", {"body": f"n{n}"}, format="json")
    transcript = url("room", "transcript", room.pk)
    page = transcripts.room_transcript(Room.objects.get(pk=room.pk), after_seq=0, page_size=4)
    assert [e.seq for e in page.entries] == [1, 2, 3, 4]
    assert (page.previous_after, page.next_after, page.last_page_after) == (None, 4, 6)

    response = admin_client.get(transcript, {"after_seq": 5})
    seqs = [e.seq for e in response.context["page"].entries]
    assert seqs == [6, 7, 8, 9, 10]
    assert 'href="?after_seq=0"' in html(response)  # earlier
    assert response.context["page"].next_after is None
    assert admin_client.get(transcript, {"after_seq": "nonsense"}).context["page"].after_seq == 0


def test_room_transcript_is_staff_only(client, room):
    response = client.get(url("room", "transcript", room.pk))
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


def test_room_transcript_for_moderators_and_missing_rooms(moderator_client, room):
    assert moderator_client.get(url("room", "transcript", room.pk)).status_code == 200
    assert moderator_client.get(url("room", "transcript", 999999)).status_code == 404


def test_transcript_page_runs_a_constant_number_of_queries(admin_client, room, session_client):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert admin_client.get(url("room", "transcript", room.pk)).status_code == 200
        return len(captured)

    few = queries()
    for n in range(20):
        sent = session_client.post(
            "/api/v1/rooms/ops/messages/", {"body": f"@bob n{n}"}, format="json"
        )
        if n % 5 == 0:
            services.message_hide(
                Message.objects.get(public_id=sent.json()["message"]["id"]), actor="a", reason="r"
            )
    assert queries() == few


# --- large tables ---------------------------------------------------------------------


def _bulk_rooms(count: int) -> None:
    """``count`` rooms, each with a member, a message and its event, written in bulk."""
    start = Room.objects.count()
    project = ProjectFactory(slug="bulk")
    workspace, _ = Workspace.objects.get_or_create(project=project, slug="bulk")
    names = AgentName.objects.bulk_create(
        AgentName(handle=f"bulk-{start + i}", workspace=workspace) for i in range(count)
    )
    now = timezone.now()
    rooms = Room.objects.bulk_create(
        Room(slug=f"bulk-{start + i}", project=project, head_seq=1, created_at=now)
        for i in range(count)
    )
    Member.objects.bulk_create(
        Member(room=r, name=n, display_name=f"Bulk {i}", read_seq=1)
        for i, (r, n) in enumerate(zip(rooms, names, strict=True))
    )
    messages = Message.objects.bulk_create(
        Message(
            room=r,
            seq=1,
            ordinal=1,
            author_ordinal=1,
            author=n,
            body=f"bulk body {i}",
            author_display_name="Bulk",
        )
        for i, (r, n) in enumerate(zip(rooms, names, strict=True))
    )
    Event.objects.bulk_create(
        Event(room=m.room, seq=1, kind=Event.Kind.MESSAGE, actor=m.author, message=m)
        for m in messages
    )


# Queries of one changelist request, session and user lookups and savepoints included.
PINNED_QUERIES = {"room": 6, "member": 6, "message": 6, "event": 6}


@pytest.mark.parametrize("model", MODELS)
def test_changelist_query_count_is_pinned_with_1000_rows(
    admin_client, model, django_assert_max_num_queries
):
    def changelist_queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            response = admin_client.get(url(model, "changelist"))
        assert response.status_code == 200
        assert len(response.context["cl"].result_list) >= 10
        return len(captured)

    _bulk_rooms(10)
    few = changelist_queries()
    _bulk_rooms(990)
    assert Room.objects.count() == Event.objects.count() == 1000
    many = changelist_queries()
    assert few == many
    with django_assert_max_num_queries(PINNED_QUERIES[model]):
        admin_client.get(url(model, "changelist"))


def test_event_changelist_never_counts_the_whole_table(admin_client, monkeypatch):
    monkeypatch.setattr(paging, "PAGES_AHEAD", 2)  # count at most 3 pages of 100
    _bulk_rooms(1000)
    with CaptureQueriesContext(connection) as captured:
        response = admin_client.get(url("event", "changelist"))
    # The paginator's counts (the header's unread count counts a person's notes, not events).
    counts = [q["sql"] for q in captured if q["sql"].upper().startswith("SELECT COUNT(")]
    assert len(counts) == 1
    assert "LIMIT 301" in counts[0].upper()
    assert response.context["cl"].paginator.capped
    assert "more than 300 events" in html(response)
    assert "Select all" not in html(response)
    deep = admin_client.get(url("event", "changelist"), {"p": 9})
    assert deep.status_code == 200
    assert "1,000 events" in html(deep)
    assert len(deep.context["cl"].result_list) == 100
