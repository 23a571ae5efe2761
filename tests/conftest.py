import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from tests.factories import ProjectKeyFactory, SessionFactory, WorkspaceFactory


@pytest.fixture(autouse=True)
def _clear_rate_limit_counters():
    """Throttle counters live in the process-wide cache; each test starts from zero."""
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def api_client() -> APIClient:
    return APIClient()


@pytest.fixture
def workspace(db):
    return WorkspaceFactory(slug="main")


@pytest.fixture
def project(workspace):
    return workspace.project


@pytest.fixture
def project_key(project):
    """A ProjectKey row; ``project_key.raw_key`` is the secret."""
    return ProjectKeyFactory(project=project)


@pytest.fixture
def key_client(project_key) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {project_key.raw_key}")
    return client


@pytest.fixture
def agent_session(workspace):
    """A connected session named ``alice``; ``agent_session.raw_token`` is its token."""
    return SessionFactory(workspace=workspace, name="alice")


@pytest.fixture
def session_client(agent_session) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {agent_session.raw_token}")
    return client


def client_for(session) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {session.raw_token}")
    return client
