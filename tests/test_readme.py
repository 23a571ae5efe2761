"""The examples of README.md and docs/ work as written: every `curl` line, against a live server.

Each file's ``sh`` blocks run in order, on a fresh database of their own.
The commands run through bash and the real curl, as a reader would paste
them. Only what a reader must fill in is filled in: ``localhost:8000``
becomes the live server's address, ``KEY=plumb_key_...`` the project key that
``make serve`` would have printed, and each ``NAME=plumb_tok_...`` the token
of the session started by the last command before it.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from mailbox import services
from mailbox.models import Note
from tests.live import no_rate_limits

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
AGENTS = ROOT / "docs" / "agents.md"
DOCUMENTS = [README, *sorted((ROOT / "docs").glob("*.md"))]
PLACEHOLDER = re.compile(r"^([A-Z_]+)=(plumb_key_|plumb_tok_)\.\.\.")
CURL_TIMEOUT = 40  # seconds; the examples' long-polls wait at most 25


def sh_commands(document: Path) -> list[str]:
    """The logical lines of a document's ``sh`` blocks: curl commands and placeholders."""
    lines: list[str] = []
    in_block = False
    pending = ""
    for raw in document.read_text(encoding="utf-8").splitlines():
        if raw.startswith("```"):
            in_block = raw.strip() == "```sh" and not in_block
            pending = ""
            continue
        if not in_block:
            continue
        line = pending + raw.strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        if line.startswith("curl ") or PLACEHOLDER.match(line):
            lines.append(line)
    return lines


def with_curl_examples() -> list[Path]:
    return [d for d in DOCUMENTS if any(c.startswith("curl ") for c in sh_commands(d))]


def answers(ran: list[tuple[str, object]], fragment: str) -> list[object]:
    """The answers to the commands that contain ``fragment``, in order."""
    found = [body for line, body in ran if fragment in line]
    assert found, f"no example contains {fragment!r}"
    return found


def test_the_readme_shows_two_sessions_a_note_and_its_delivery():
    commands = " ".join(sh_commands(README))
    for text in ('"name": "alice"', '"name": "bob"', "/api/v1/notes/ ", "/api/v1/notes/?wait="):
        assert text in commands


def test_the_agents_page_shows_curl_examples_for_every_part_of_the_api():
    commands = " ".join(sh_commands(AGENTS))
    for path in (
        "/api/v1/sessions/",
        "/api/v1/sessions/current/",
        "/api/v1/notes/",
        "/api/v1/rooms/",
        "/api/v1/activity/",
        "/api/v1/mentions/",
        "/healthz",
    ):
        assert path in commands


def test_the_readme_and_the_agents_page_are_among_the_documents_whose_examples_run():
    assert {README, AGENTS} <= set(with_curl_examples())


def check_readme(ran: list[tuple[str, object]]) -> None:
    # alice's note reaches bob, at once, and nothing else waits.
    (inbox,) = answers(ran, "notes/?wait=")
    assert [(n["from"]["name"], n["body"]) for n in inbox["notes"]] == [
        ("alice", "Tests are green; please review.")
    ]
    assert not Note.objects.filter(delivered_at__isnull=True).exists()


def check_agents(ran: list[tuple[str, object]]) -> None:
    # Ending a session frees its name: builder starts again, with a new token.
    first, again = answers(ran, '"name": "builder"')
    assert first["token"] != again["token"]
    # The mailbox example delivers its note to the second session, at once...
    (inbox,) = answers(ran, "notes/?wait=")
    assert [note["body"] for note in inbox["notes"]] == ["Tests are green; please review."]
    # ...and the "next" note skips the reviewer, connected before it was sent, and
    # reaches the session that starts after it, with its start.
    (reviewer_check,) = answers(ran, 'notes/ -H "Authorization: Bearer $REVIEWER"')
    assert reviewer_check["notes"] == []
    (writer,) = answers(ran, '"name": "writer"')
    assert [(n["to"], n["body"]) for n in writer["notes"]] == [
        ("next", "Hand-over: the docs are next.")
    ]
    assert not Note.objects.filter(delivered_at__isnull=True).exists()
    # The rooms example reads the history it just wrote.
    (history,) = answers(ran, "messages/?after_seq=0")
    assert [event["kind"] for event in history["events"]] == ["join", "message"]
    # The waiting examples answer at once: the reviewer has news, then reads it.
    (news,) = answers(ran, "activity/?wait=")
    assert news == {
        "notes": [],
        "rooms": [{"slug": "release", "latest_seq": 4, "read_seq": 3, "unseen": 1}],
    }
    (welcome,) = answers(ran, "messages/?wait=")
    assert [event["message"]["body"] for event in welcome["events"]] == ["Welcome, @reviewer"]
    # Only the message sent once the reviewer was a member mentions it.
    (mentions,) = answers(ran, "/api/v1/mentions/")
    assert [m["body"] for m in mentions["mentions"]] == ["Welcome, @reviewer"]


CHECKS: dict[Path, Callable[[list[tuple[str, object]]], None]] = {
    README: check_readme,
    AGENTS: check_agents,
}


@pytest.mark.parametrize("document", with_curl_examples(), ids=lambda d: str(d.relative_to(ROOT)))
@pytest.mark.django_db(transaction=True)
def test_every_curl_example_answers_2xx(document, live_server, settings, tmp_path):
    no_rate_limits(settings)
    boot = services.site_bootstrap(created_by="readme-test")
    env = {"PATH": "/usr/bin:/bin", "KEY": boot.issued.raw}
    address = live_server.url.removeprefix("http://")
    body_file = tmp_path / "body.json"
    last_token = None
    ran: list[tuple[str, object]] = []
    for line in sh_commands(document):
        placeholder = PLACEHOLDER.match(line)
        if placeholder:
            name, kind = placeholder.groups()
            if kind == "plumb_tok_":
                assert last_token, f"{name}=... comes before any session was started"
                env[name] = last_token
            continue
        command = line.split(" #", 1)[0].replace("localhost:8000", address)
        body_file.unlink(missing_ok=True)
        result = subprocess.run(
            ["bash", "-c", f"{command} -o {body_file} -w '%{{http_code}}'"],
            env=env,
            capture_output=True,
            text=True,
            timeout=CURL_TIMEOUT,
            check=False,
        )
        status = result.stdout.strip()
        body = body_file.read_text(encoding="utf-8") if body_file.exists() else ""
        assert status.startswith("2"), f"{line}\n→ {status} {body} {result.stderr}"
        ran.append((line, json.loads(body) if body.startswith("{") else body))
        if isinstance(ran[-1][1], dict) and ran[-1][1].get("token"):
            last_token = ran[-1][1]["token"]

    assert ran
    if document in CHECKS:
        CHECKS[document](ran)
