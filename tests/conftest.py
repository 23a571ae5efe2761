import contextlib
import gc
import json
import re
import sys
import threading

import pytest
from django.conf import settings
from django.core import signals
from django.core.cache import cache
from django.db import close_old_connections, connection, connections
from rest_framework.test import APIClient

from tests import throwaway
from tests.factories import ProjectKeyFactory, SessionFactory, WorkspaceFactory


@pytest.fixture(autouse=True)
def _clear_rate_limit_counters():
    """Throttle counters live in the process-wide cache; each test starts from zero."""
    cache.clear()
    yield
    cache.clear()


@pytest.fixture(scope="session")
def redis_url():
    """A Redis for tests that share counters between processes: the run's ``REDIS_URL``
    (``scripts/with-redis``) or a throwaway server, started once per run."""
    with throwaway.redis_url() as url:
        yield url


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup):
    """pytest-django's test database, which the front's threads let go of before it is dropped.

    The server's front (``plumb_site/asgi.py``) runs Django in a pool of
    threads, and commits woken reads in a thread of its own, both as long
    as the process lives; each thread keeps its connection, as it does when
    serving. PostgreSQL refuses to drop a database others are connected to,
    so the test database would outlive the run with a warning.
    """
    yield
    front = sys.modules.get("plumb_site.asgi")
    if front is not None:
        threads_close_their_connections(front.django_threads, settings.PLUMB_THREADS)
        threads_close_their_connections(front._group_commit.executor, 1)
    # A thread that ended with its connection open leaves it in circles among
    # Django's objects, closed only when the collector frees them: now.
    gc.collect()


def threads_close_their_connections(pool, width: int) -> None:
    """Have each of the ``width`` threads of ``pool`` close its database connections.

    Each task waits for all the others before it ends, so no thread takes
    two and every thread of the pool takes one (the pool starts those it
    has not started yet).
    """
    together = threading.Barrier(width)

    def close_then_wait() -> None:
        connections.close_all()
        together.wait(timeout=30)

    for task in [pool.submit(close_then_wait) for _ in range(width)]:
        task.result(timeout=60)


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
def alice(agent_session):
    """The ``alice`` session of ``agent_session``, for tests that speak of several agents."""
    return agent_session


@pytest.fixture
def bob(workspace):
    return SessionFactory(workspace=workspace, name="bob")


@pytest.fixture
def carol(workspace):
    return SessionFactory(workspace=workspace, name="carol")


@pytest.fixture
def session_client(agent_session) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {agent_session.raw_token}")
    return client


def client_for(session) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {session.raw_token}")
    return client


SNAKE_CASE = re.compile(r"^[a-z][a-z0-9_]*$")


def assert_error(response, status: int, code: str | None = None) -> dict:
    """Check the one error shape of SPEC §2, as JSON, and return its ``error`` object."""
    content = response.content
    assert response.status_code == status, content[:500]
    media_type = response.get("Content-Type", "").split(";")[0].strip()
    assert media_type == "application/json", (response.get("Content-Type"), content[:200])
    assert b"<html" not in content.lower()
    body = json.loads(content)
    # schema_stale is the one addition SPEC §2 allows next to the error.
    assert set(body) <= {"error", "schema_stale"}, body
    error = body["error"]
    assert set(error) == {"code", "message", "details"}, error
    assert SNAKE_CASE.match(error["code"]), error["code"]
    if code is not None:
        assert error["code"] == code, error
    assert isinstance(error["message"], str)
    assert error["message"].strip()
    assert isinstance(error["details"], dict)
    return error


def pytest_collection_modifyitems(config, items):
    """On SQLite, the tests that need PostgreSQL itself are not run here but handed, all
    at once, to a throwaway PostgreSQL by ``tests/test_postgres_only.py``: none is skipped."""
    if connection.vendor == "postgresql":
        # This run is PostgreSQL's: the hand-over, and what is about SQLite itself,
        # are what is left out.
        left = [
            i
            for i in items
            if i.nodeid.startswith("tests/test_postgres_only.py") or i.get_closest_marker("sqlite")
        ]
        if left:
            config.hook.pytest_deselected(items=left)
            items[:] = [i for i in items if i not in left]
        return
    handed = [item for item in items if item.get_closest_marker("postgresql")]
    if handed:
        config.hook.pytest_deselected(items=handed)
        items[:] = [item for item in items if not item.get_closest_marker("postgresql")]


@contextlib.contextmanager
def connection_kept():
    """Requests made inside keep the test's connection, as Django's test client's do.

    Django closes the connection at the start and end of each request when it
    is not in autocommit mode, as inside a test's transaction; its test client
    unhooks the same handler for the same reason.
    """
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)
