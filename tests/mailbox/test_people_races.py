"""One namespace for people and agents, under races made to happen (tests/races.py), on
both databases: a person's claim and an agent's session start racing for one handle
leave it to whichever committed first, and refuse the other with ``name_taken``.
"""

from __future__ import annotations

import pytest

from mailbox import services
from mailbox.errors import NameTaken
from mailbox.models import AgentName, Person, Session
from tests.factories import ProjectKeyFactory, UserFactory, WorkspaceFactory
from tests.races import race

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def key():
    return ProjectKeyFactory(project=WorkspaceFactory(slug="races").project)


def test_an_agent_starting_under_a_handle_being_claimed_waits_and_is_refused(key):
    user = UserFactory(username="ada")
    first, second, state = race(
        "person.claimed",
        lambda: services.person_claim(user, handle="ada", actor="admin:ada"),
        lambda: services.session_start(key, workspace_slug="races", name="ada"),
    )
    person = first.outcome()
    with pytest.raises(NameTaken, match="person's handle"):
        second.outcome()
    assert state == "blocked"
    assert person.name.handle == "ada"
    assert AgentName.objects.get(handle="ada").kind == "human"
    assert not Session.objects.filter(name__handle="ada", project_key=key).exists()


def test_a_person_claiming_a_name_an_agent_is_starting_under_waits_and_is_refused(key):
    user = UserFactory(username="ada")
    first, second, state = race(
        "session.started",
        lambda: services.session_start(key, workspace_slug="races", name="ada"),
        lambda: services.person_claim(user, handle="ada", actor="admin:ada"),
    )
    started = first.outcome()
    with pytest.raises(NameTaken, match="an agent's name"):
        second.outcome()
    assert state == "blocked"
    assert started.session.name.kind == "agent"
    assert not Person.objects.exists()
