"""Generated names (SPEC §3.1 "the server generates a readable free one") never run out.

They come from a space that cannot run out: ``adjective-animal-NN``, then
more digits.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from rest_framework.test import APIClient

from mailbox import services
from mailbox.models import AgentName, Session

pytestmark = pytest.mark.django_db

SHORT = "amber-badger-10"  # the one short name when every draw is the first word and number
WIDE = "amber-badger-1000"  # the same draw with four digits


@pytest.fixture
def one_short_name(monkeypatch):
    """The generator's draws, fixed: the first adjective, animal and number every time.

    The short form then holds one name, ``amber-badger-10``: a start while it
    is taken must find another.
    """
    fixed = SimpleNamespace(choice=lambda words: words[0], randbelow=lambda _: 0)
    monkeypatch.setattr("mailbox.services.sessions.secrets", fixed)


def start(client: APIClient, **body):
    return client.post("/api/v1/sessions/", {"workspace": "main", **body}, format="json")


# --- a space that cannot run out --------------------------------------------------------


def test_a_start_still_gets_a_readable_name_when_every_short_one_is_taken(
    key_client, workspace, monkeypatch
):
    monkeypatch.setattr("mailbox.services.sessions._ADJECTIVES", ["amber"])
    monkeypatch.setattr("mailbox.services.sessions._ANIMALS", ["otter"])
    # Every short name (amber-otter-10 ... amber-otter-99) is chosen and held.
    AgentName.objects.bulk_create(
        AgentName(handle=f"amber-otter-{n}", workspace=workspace) for n in range(10, 100)
    )

    response = start(key_client)

    assert response.status_code == 201, response.json()
    name = response.json()["session"]["name"]
    assert re.fullmatch(r"amber-otter-[1-9]\d{3}", name), name
    assert AgentName.objects.count() == 91


def test_a_start_draws_a_longer_name_while_the_short_one_is_in_use(key_client, one_short_name):
    first = start(key_client).json()["session"]["name"]
    second = start(key_client).json()["session"]["name"]
    third = start(key_client).json()["session"]["name"]

    assert (first, second) == (SHORT, WIDE)
    assert third == "amber-badger-100000"
    assert Session.objects.filter(ended_at__isnull=True).count() == 3


def test_the_widest_generated_name_is_still_a_valid_handle():
    from mailbox.services import sessions

    longest = max(sessions._ADJECTIVES, key=len) + "-" + max(sessions._ANIMALS, key=len) + "-"
    widest = longest + "9" * max(sessions._NUMBER_WIDTHS)
    assert services.handle_check(widest) == widest
