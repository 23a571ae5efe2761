import pytest

from tests.scale.harness import Api, PlumbServer, database_url


@pytest.fixture(scope="module")
def shared_server(django_db_setup, tmp_path_factory):
    """plumb under gunicorn (4 processes x 4 threads) on the test database, for
    every test of a module: starting one takes seconds on a small machine.

    Sharing is safe because nothing a test relies on lives in the server
    processes: each test seeds its own rows (committed, ``transaction=True``)
    and pytest-django empties the tables after it, while the server sits idle
    between tests (no client request outlives its test, and an idle
    connection holds no lock that would block the flush). Row ids are not
    reused after a flush, so no stale per-process value can match a new row.
    """
    plumb = PlumbServer(database_url(), workdir=tmp_path_factory.mktemp("server"))
    plumb.start()
    try:
        yield plumb
    finally:
        plumb.stop()


@pytest.fixture
def server(shared_server, transactional_db):
    """The module's server, counting answered requests for this test only."""
    if not shared_server.healthy():
        shared_server.stop()
        shared_server.start()
    shared_server.count_from_here()
    return shared_server


@pytest.fixture
def own_server(transactional_db, tmp_path):
    """A server of its own, for a test that kills and restarts it. Set up after,
    and so torn down before, the database fixture that empties the tables."""
    plumb = PlumbServer(database_url(), workdir=tmp_path / "server")
    plumb.start()
    try:
        yield plumb
    finally:
        plumb.stop()


@pytest.fixture
def api(server) -> Api:
    return Api(server)


@pytest.fixture
def own_api(own_server) -> Api:
    return Api(own_server)
