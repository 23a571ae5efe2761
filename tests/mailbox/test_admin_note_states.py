"""Delivery you can see, for operators (issue 25, item 8): the notes list filters by
state and shows the waiting longest first, per project; the home page counts
bounces; ``/metrics`` counts them too."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse

from mailbox import services
from tests.factories import ProjectFactory, SessionFactory, WorkspaceFactory

pytestmark = pytest.mark.django_db

NOTES = "/admin/mailbox/note/"


@pytest.fixture
def notes(alice, bob):
    """alice's notes: one delivered, one bounced (with plumb's notice), two waiting."""
    delivered = services.note_leave(alice, to="bob", body="delivered").note
    services.notes_claim(bob)
    bounced = services.note_leave(alice, to="next", body="bounced").note
    services.notes_bounce(now=bounced.created_at + timedelta(days=8))
    older = services.note_leave(alice, to="next", body="older").note
    newer = services.note_leave(alice, to="next", body="newer").note
    return {"delivered": delivered, "bounced": bounced, "older": older, "newer": newer}


def listed(response) -> list[str]:
    return [note.public_id for note in response.context["cl"].result_list]


def test_the_notes_list_filters_by_state(admin_client, notes):
    bounced = admin_client.get(NOTES, {"state": "bounced"})
    delivered = admin_client.get(NOTES, {"state": "delivered"})

    assert listed(bounced) == [notes["bounced"].public_id]
    # plumb's notice went to alice, who has not called since: it waits.
    assert notes["delivered"].public_id in listed(delivered)
    assert notes["bounced"].public_id not in listed(delivered)
    assert 'plumb-badge-danger">bounced<' in bounced.content.decode()


def test_waiting_notes_are_listed_longest_waiting_first_per_project(admin_client, notes):
    elsewhere = WorkspaceFactory(project=ProjectFactory(slug="elsewhere"), slug="main")
    services.note_leave(SessionFactory(workspace=elsewhere, name="zed"), to="next", body="z")
    project = notes["older"].sender_name.workspace.project.slug

    response = admin_client.get(NOTES, {"state": "waiting", "project": project})

    assert listed(response) == [notes["older"].public_id, notes["newer"].public_id]


def test_each_project_links_to_its_notes_waiting_longest(admin_client, notes):
    project = notes["older"].sender_name.workspace.project.slug

    page = admin_client.get(reverse("admin:mailbox_project_changelist")).content.decode()

    assert f"{NOTES}?state=waiting&amp;project={project}" in page


def test_the_home_page_counts_the_bounces_of_the_last_day(admin_client, notes):
    response = admin_client.get(reverse("admin:index"))

    [row] = response.context["glance"]["rows"]
    assert row["figures"].bounced_last_day == 1
    assert response.context["glance"]["total"]["figures"].bounced_last_day == 1
    assert f"{NOTES}?state=bounced&amp;project=" in response.content.decode()


def test_metrics_count_bounces(client, alice, django_capture_on_commit_callbacks):
    note = services.note_leave(alice, to="next", body="nobody").note
    before = _bounces(client)

    with django_capture_on_commit_callbacks(execute=True):
        services.notes_bounce(now=note.created_at + timedelta(days=8))

    assert _bounces(client) == before + 1


def _bounces(client) -> float:
    text = client.get("/metrics").content.decode()
    [line] = [ln for ln in text.splitlines() if ln.startswith("plumb_notes_bounced_total ")]
    return float(line.split()[1])
