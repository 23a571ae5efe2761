"""Fixtures of the room API tests built on tests/rooms/messaging.py."""

import pytest

from rooms.models import Room
from tests.rooms.messaging import create_room, join


@pytest.fixture
def _no_rate_limits(settings):
    # Some tests make more calls per second than the default session rate allows. Asked
    # for by each file's pytestmark rather than autouse, which would reach every room test.
    settings.PLUMB_RATE_SESSION = None


@pytest.fixture
def general(alice, bob):
    """bob creates ``general`` (seq 1, "Bob"), alice joins it (seq 2, "Alice"): alice
    starts caught up (read_seq 2) and bob does not (read_seq 1)."""
    assert create_room(bob, "general", display_name="Bob").status_code == 201
    assert join(alice, "general", display_name="Alice").status_code == 201
    return Room.objects.get(slug="general")
