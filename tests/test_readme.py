"""The README's examples work as written: every `curl` line, in order, against a live server.

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
from pathlib import Path

import pytest

from mailbox import services
from mailbox.models import Note
from tests.live import no_rate_limits

README = Path(__file__).resolve().parent.parent / "README.md"
PLACEHOLDER = re.compile(r"^([A-Z_]+)=(plumb_key_|plumb_tok_)\.\.\.")
CURL_TIMEOUT = 40  # seconds; the README's long-polls wait at most 25


def readme_commands() -> list[str]:
    """The logical lines of the README's ``sh`` blocks: curl commands and placeholders."""
    lines: list[str] = []
    in_block = False
    pending = ""
    for raw in README.read_text(encoding="utf-8").splitlines():
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


def test_the_readme_shows_curl_examples_for_sessions_notes_and_rooms():
    commands = " ".join(readme_commands())
    for path in ("/api/v1/sessions/", "/api/v1/notes/", "/api/v1/rooms/", "/healthz"):
        assert path in commands


@pytest.mark.django_db(transaction=True)
def test_every_curl_example_of_the_readme_answers_2xx(live_server, settings, tmp_path):
    no_rate_limits(settings)
    boot = services.site_bootstrap(created_by="readme-test")
    env = {"PATH": "/usr/bin:/bin", "KEY": boot.issued.raw}
    address = live_server.url.removeprefix("http://")
    body_file = tmp_path / "body.json"
    last_token = None
    ran = []
    for line in readme_commands():
        placeholder = PLACEHOLDER.match(line)
        if placeholder:
            name, kind = placeholder.groups()
            if kind == "plumb_tok_":
                assert last_token, f"{name}=... comes before any session was started"
                env[name] = last_token
            continue
        command = line.split(" #", 1)[0].replace("localhost:8000", address)
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
        if ran[-1][1] and isinstance(ran[-1][1], dict) and ran[-1][1].get("token"):
            last_token = ran[-1][1]["token"]

    assert len(ran) >= 8
    # The mailbox example delivers its note to the second session, at once.
    (_, inbox), *_ = [r for r in ran if "notes/?wait=" in r[0]]
    assert [note["body"] for note in inbox["notes"]] == ["Tests are green; please review."]
    assert Note.objects.filter(delivered_at__isnull=True).count() == 1  # the "next" note
    # The rooms example reads the history it just wrote.
    (_, history), *_ = [r for r in ran if "messages/?after_seq=0" in r[0]]
    assert [event["kind"] for event in history["events"]] == ["join", "message"]
    # The waiting examples answer at once: the reviewer has news, then reads it.
    (_, news), *_ = [r for r in ran if "activity/?wait=" in r[0]]
    assert news == {
        "notes": [],
        "rooms": [{"slug": "release", "latest_seq": 4, "read_seq": 3, "unseen": 1}],
    }
    (_, welcome), *_ = [r for r in ran if "messages/?wait=" in r[0]]
    assert [event["message"]["body"] for event in welcome["events"]] == ["Welcome, @reviewer"]
