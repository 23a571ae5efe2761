"""Calls to the note, session and conversation endpoints, and the checks the note API
tests share (``tests/mailbox/test_note_*.py``, ``test_conversation_*_api.py``)."""

from rest_framework.test import APIClient

from mailbox.models import Conversation, Note, Participant, Session
from tests.conftest import client_for
from tests.factories import ProjectKeyFactory

NOTES = "/api/v1/notes/"
SESSIONS = "/api/v1/sessions/"
CONVERSATIONS = "/api/v1/conversations/"

NOTE_FIELDS = {
    "id",
    "conversation_id",
    "from",
    "to",
    "body",
    "created_at",
    "position",
    "exchanges_left",
    "state",
    "delivered_at",
    "delivered_to",
    "bounce_of",
}


def leave(session, **body):
    return client_for(session).post(NOTES, body, format="json")


def check(session, **params):
    return client_for(session).get(NOTES, params)


def history(session, conversation_id):
    return client_for(session).get(f"{CONVERSATIONS}{conversation_id}/")


def start_session(workspace, name=None):
    """POST /api/v1/sessions/ with a fresh key of the workspace's project."""
    key = ProjectKeyFactory(project=workspace.project)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key.raw_key}")
    body = {"workspace": workspace.slug}
    if name is not None:
        body["name"] = name
    return client.post(SESSIONS, body, format="json")


def session_from(response) -> Session:
    """The session a successful start created, carrying its token like the factory's."""
    session = Session.objects.get(public_id=response.json()["session"]["id"])
    session.raw_token = response.json()["token"]
    return session


def stored() -> tuple[int, int, int]:
    return Note.objects.count(), Conversation.objects.count(), Participant.objects.count()


def assert_refused(response, status: int, code: str) -> None:
    body = response.json()
    assert response.status_code == status, body
    assert body["error"]["code"] == code
    assert set(body["error"]) == {"code", "message", "details"}
    assert "notes" not in body  # never a delivery on an error response


def note_row(response) -> Note:
    return Note.objects.get(public_id=response.json()["note"]["id"])


def ids(notes: list[dict]) -> list[str]:
    return [n["id"] for n in notes]


def participant_names(conversation_id: str) -> set[str]:
    return set(
        Participant.objects.filter(conversation__public_id=conversation_id).values_list(
            "name__handle", flat=True
        )
    )
