"""Conversations and notes in the admin: read-only pages, transcripts rendered
sanitised, and the lock action with its required reason.
"""

import pytest
from django.urls import reverse

from mailbox.models import AuditRecord, Conversation
from tests.mailbox.admin_pages import bearer, conversation_action, html, url

pytestmark = pytest.mark.django_db


def test_conversation_pages_list_participants_and_notes(admin_client, conversation):
    changelist = admin_client.get(url("conversation", "changelist"))
    assert "alice, bob" in html(changelist)
    page = admin_client.get(url("conversation", "change", conversation.pk))
    assert page.status_code == 200
    body = html(page)
    assert "hello **bob**" in body
    assert "hi alice" in body
    assert reverse("admin:mailbox_conversation_transcript", args=[conversation.pk]) in body
    assert 'value="lock_conversations"' in body


def test_conversations_are_never_added_changed_or_deleted(admin_client, conversation):
    assert admin_client.get(url("conversation", "add")).status_code == 403
    assert admin_client.post(url("conversation", "change", conversation.pk), {}).status_code == 403
    response = admin_client.post(url("conversation", "delete", conversation.pk), {"post": "yes"})
    assert response.status_code == 403
    assert Conversation.objects.filter(pk=conversation.pk).exists()


def test_lock_action_needs_a_reason(admin_client, conversation):
    response = conversation_action(admin_client, "lock_conversations", conversation, " ")
    assert response.status_code == 200
    assert response.context["form"].errors
    conversation.refresh_from_db()
    assert conversation.locked_at is None
    assert not AuditRecord.objects.filter(action__startswith="conversation.").exists()


def test_lock_action_refuses_further_notes_and_is_audited(admin_client, conversation, bob):
    response = conversation_action(admin_client, "lock_conversations", conversation, "off topic")
    assert response.status_code == 302
    refused = bearer(bob.raw_token).post(
        "/api/v1/notes/",
        {"body": "still there?", "conversation_id": conversation.public_id},
        format="json",
    )
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "conversation_locked"
    record = AuditRecord.objects.get(action="conversation.lock")
    assert (record.actor, record.reason) == ("admin:admin", "off topic")
    assert conversation.public_id in record.target

    conversation_action(admin_client, "unlock_conversations", conversation, "")
    accepted = bearer(bob.raw_token).post(
        "/api/v1/notes/",
        {"body": "back again", "conversation_id": conversation.public_id},
        format="json",
    )
    assert accepted.status_code == 201
    assert AuditRecord.objects.filter(action="conversation.unlock", actor="admin:admin").exists()


def test_conversation_transcript_renders_notes_sanitised(admin_client, session_client, bob):
    started = session_client.post(
        "/api/v1/notes/",
        {"body": "<script>alert(1)</script> [x](javascript:alert(1)) **ok**", "to": "bob"},
        format="json",
    ).json()
    conversation = Conversation.objects.get(public_id=started["conversation_id"])
    response = admin_client.get(
        reverse("admin:mailbox_conversation_transcript", args=[conversation.pk])
    )
    assert response.status_code == 200
    body = html(response)
    notes = body[body.index('class="plumb-events"') :]
    assert "<script" not in notes
    assert "&lt;script&gt;" in notes
    assert 'href="javascript' not in notes
    assert "<strong>ok</strong>" in notes
    assert "@alice" in notes
    assert "waiting" in notes


def test_conversation_transcript_pages_by_position(admin_client, conversation, bob):
    for n in range(3):
        bearer(bob.raw_token).post(
            "/api/v1/notes/",
            {"body": f"more {n}", "conversation_id": conversation.public_id},
            format="json",
        )
    transcript = reverse("admin:mailbox_conversation_transcript", args=[conversation.pk])
    response = admin_client.get(transcript, {"after_seq": 3})
    assert [e.seq for e in response.context["page"].entries] == [4, 5]
    assert 'href="?after_seq=0"' in html(response)


def test_notes_are_read_only_and_rendered_sanitised(admin_client, conversation):
    note = conversation.notes.order_by("position").first()
    assert admin_client.get(url("note", "add")).status_code == 403
    assert admin_client.post(url("note", "change", note.pk), {"body": "x"}).status_code == 403
    page = html(admin_client.get(url("note", "change", note.pk)))
    assert "<strong>bob</strong>" in page  # rendered
    assert "hello **bob**" in page  # and as stored
    assert admin_client.get(url("note", "changelist"), {"q": note.public_id}).status_code == 200
