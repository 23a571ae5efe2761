"""HEAD under gunicorn, as ``make serve`` runs it: the server drops a HEAD answer's
body, so a HEAD that delivered notes would lose them (SPEC §2).

Bob's pending note survives HEADs of every session read, and his next GET
delivers it; his read position in a room stays where it was.
"""

from __future__ import annotations

import http.client

import pytest

from tests.factories import ProjectKeyFactory, WorkspaceFactory
from tests.scale.harness import Api, call

pytestmark = pytest.mark.django_db(transaction=True)


def head(api: Api, path: str, token: str) -> tuple[int, str, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", api.server.port, timeout=30)
    try:
        connection.request("HEAD", f"/api/v1{path}", headers={"Authorization": f"Bearer {token}"})
        response = connection.getresponse()
        return response.status, response.getheader("Allow", ""), response.read()
    finally:
        connection.close()


def test_head_never_delivers_a_note_nor_moves_a_read_position(api):
    workspace = WorkspaceFactory(slug="main")
    key = ProjectKeyFactory(project=workspace.project).raw_key
    alice = api.start_session(key, "main", "alice")[1]["token"]
    bob = api.start_session(key, "main", "bob")[1]["token"]
    assert api.create_room(alice, "lab")[0] == 201
    assert api.join(bob, "lab")[0] == 201
    assert api.send(alice, "lab", body="news")[0] == 201
    assert api.leave_note(alice, body="for bob", to="bob")[0] == 201

    for path in ("/notes/", "/sessions/current/", "/rooms/lab/messages/", "/activity/"):
        status, allow, body = head(api, path, bob)
        assert (status, body) == (405, b""), path
        assert "HEAD" not in allow, (path, allow)
        assert "GET" in allow, (path, allow)

    status, checked = api.check_notes(bob)
    assert status == 200
    assert [note["body"] for note in checked["notes"]] == ["for bob"]
    # From bob's stored read position: had a HEAD moved it, this would be empty.
    status, read = call("GET", f"{api.base}/rooms/lab/messages/", token=bob)
    assert status == 200
    assert [e["message"]["body"] for e in read["events"] if e["kind"] == "message"] == ["news"]
