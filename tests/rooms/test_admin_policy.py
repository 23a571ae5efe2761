"""Operator policy in the admin (SPEC §8): settings audited, their use shown, pauses
resumed with a reason, projects exported."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from common.admin.actions import CONFIRM_FIELD
from mailbox import services as mailbox_services
from mailbox.models import AuditRecord, Project
from rooms import services
from rooms.errors import RoomPaused
from rooms.models import Event, Room
from tests.mailbox.admin_pages import optin_inline_data, project_form_data

pytestmark = pytest.mark.django_db


def test_the_project_page_changes_each_setting_audited_with_old_and_new(admin_client, project):
    url = reverse("admin:mailbox_project_change", args=[project.pk])
    page = admin_client.get(url).content.decode()
    assert "Policy: caps, budgets and retention" in page
    assert "0 means none" in page

    data = project_form_data(
        project, daily_note_budget="50", room_flood_limit="30", retention_days="7"
    )
    assert admin_client.post(url, {**data, **optin_inline_data()}).status_code == 302

    project.refresh_from_db()
    assert (project.daily_note_budget, project.room_flood_limit, project.retention_days) == (
        50,
        30,
        7,
    )
    targets = dict(AuditRecord.objects.values_list("action", "target"))
    assert targets["project.daily_note_budget"] == "0 → 50"
    assert targets["project.room_flood_limit"] == "120 → 30"
    assert targets["project.retention_days"] == "0 → 7"


def test_the_project_page_and_the_home_show_each_caps_use(admin_client, alice, bob, project):
    mailbox_services.project_update(
        project, actor="test", daily_note_budget=5, max_connected_sessions=3, room_flood_limit=1
    )
    alice.workspace.project.refresh_from_db()
    mailbox_services.note_leave(alice, body="counted", to="bob")
    services.room_create(alice, slug="lab")
    services.message_send(alice, "lab", body="one")
    with pytest.raises(RoomPaused):
        services.message_send(alice, "lab", body="one too many")

    page = admin_client.get(reverse("admin:mailbox_project_change", args=[project.pk]))
    text = page.content.decode()
    assert "Notes sent today (UTC): 1 of 5" in text
    assert "Connected sessions</a>: 2 of 3" in text
    assert "Rooms paused now</a> (flood limit 1 a minute): 1" in text

    home = admin_client.get(reverse("admin:index")).content.decode()
    assert "notes today 1/5" in home
    assert "1 room paused" in home
    assert "of 3" in home


def test_an_operator_resumes_a_paused_room_from_the_admin_with_a_reason(
    admin_client, alice, project
):
    mailbox_services.project_update(project, actor="test", room_flood_limit=1)
    alice.workspace.project.refresh_from_db()
    services.room_create(alice, slug="lab")
    services.message_send(alice, "lab", body="one")
    with pytest.raises(RoomPaused):
        services.message_send(alice, "lab", body="paused")
    room = Room.objects.get(slug="lab")
    changelist = reverse("admin:rooms_room_changelist")
    assert "paused" in admin_client.get(changelist + "?paused=yes").content.decode()

    response = admin_client.post(
        changelist,
        {
            "action": "resume_rooms",
            "_selected_action": [str(room.pk)],
            CONFIRM_FIELD: "1",
            "reason": "loop fixed",
        },
    )

    assert response.status_code == 302
    assert not services.room_paused_now(Room.objects.get(pk=room.pk))
    record = AuditRecord.objects.get(action="room.resume")
    assert (record.actor, record.reason) == ("admin:admin", "loop fixed")
    assert Event.objects.filter(kind="moderation").order_by("-seq").first().data["action"] == (
        "resume"
    )


def test_the_export_action_streams_the_projects_lines(admin_client, alice, project):
    services.room_create(alice, slug="lab")
    services.message_send(alice, "lab", body="exported")
    response = admin_client.post(
        reverse("admin:mailbox_project_changelist"),
        {"action": "export_projects", "_selected_action": [str(project.pk)]},
    )
    assert response.status_code == 200
    assert response.streaming
    assert response["Content-Type"].startswith("application/jsonl")
    lines = [json.loads(line) for line in b"".join(response.streaming_content).splitlines()]
    assert lines[0]["type"] == "project"
    assert [
        line["message"]["body"] for line in lines if line["type"] == "event" and line["message"]
    ] == ["exported"]
    assert Project.objects.count() == 1
