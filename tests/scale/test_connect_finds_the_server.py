"""``plumb connect`` prints where the running server listens, not this shell's guess
(SPEC §5), and says so loudly when nothing answers there.

The server is started on a port of its own (not 8000), as ``make serve
PORT=…`` would; the command runs in another process with none of the
server's variables but its ``var/`` folder and database, as an operator in
another shell of the same checkout would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from django.conf import settings

from tests.factories import WorkspaceFactory
from tests.scale.harness import PlumbServer, database_url

pytestmark = pytest.mark.django_db(transaction=True)


def connect(server: PlumbServer, project: str) -> subprocess.CompletedProcess:
    environment = {
        k: v for k, v in os.environ.items() if not k.startswith(("PLUMB_", "HOST", "PORT"))
    }
    environment.update(DATABASE_URL=server.db_url, PLUMB_VAR_DIR=str(server.var_dir), PORT="8000")
    return subprocess.run(
        [
            sys.executable,
            "manage.py",
            "plumb",
            "connect",
            project,
            "main",
            "bob",
            "--client",
            "json",
        ],
        cwd=settings.BASE_DIR,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_connect_prints_the_port_the_server_listens_on_and_warns_once_it_is_gone(tmp_path):
    project = WorkspaceFactory(slug="main").project.slug
    server = PlumbServer(database_url(), workdir=tmp_path / "server", workers=1)
    server.start()
    try:
        assert server.port != 8000
        running = connect(server, project)
    finally:
        server.stop()
    gone = connect(server, project)

    assert running.returncode == 0, running.stderr
    assert json.loads(running.stdout)["url"] == f"http://127.0.0.1:{server.port}/mcp"
    assert "WARNING" not in running.stderr
    assert gone.returncode == 0, gone.stderr
    assert json.loads(gone.stdout)["url"] == "http://127.0.0.1:8000/mcp"
    assert "WARNING: nothing answers at http://127.0.0.1:8000" in gone.stderr
