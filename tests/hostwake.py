"""Another server process of this host, played for wake-up tests (SQLite's datagrams).

A sparse topic (``common/wake/topics.py``) reaches only the processes of the
host that announce they wait on its kind. These helpers let a test be one
such process (``host_listener``) while a subprocess publishes as another's
commit does (``other_process``), so the announcement, the scan that reads
it and the datagram are the real ones; ``busy_listener`` is a socket of
another process that reads nothing until the test reads it. The rows a
test's publication stands for are written in the test's own process, with
no publication of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from common import wake

PROMPT = 10.0  # seconds a step that should be at once may take

# django.setup() imports every app, and with them every topic kind made
# sparse: the sending process knows them all, as a server process does.
OTHER_PROCESS = """
import sys
import django
django.setup()
from common import wake
from common.pause import set_hook

def held():
    print("scanned", flush=True)
    sys.stdin.readline()

if sys.argv[1] == "held":
    set_hook("wake.host.scanned", held)
wake.host.send(sys.argv[2:])
print("sent", flush=True)
"""


def other_process(tmp_path, topics: list[str], *, held: bool = False) -> subprocess.Popen:
    """A process of this host publishing ``topics``; ``held``: it prints "scanned" once
    it has listed the listeners, and sends when a line is written to its stdin."""
    env = {
        **{k: v for k, v in os.environ.items() if k != "DATABASE_URL"},
        "DJANGO_SETTINGS_MODULE": "plumb_site.settings",
        "PLUMB_VAR_DIR": str(tmp_path),
    }
    return subprocess.Popen(
        [sys.executable, "-c", OTHER_PROCESS, "held" if held else "now", *topics],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


@contextlib.contextmanager
def host_listener() -> Iterator[wake.host.Listener]:
    """This process listening for the host's publications, as a server process does."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start() -> wake.host.Listener:
        return wake.host.Listener(asyncio.get_running_loop())

    listener = asyncio.run_coroutine_threadsafe(start(), loop).result(PROMPT)
    try:
        yield listener
    finally:
        loop.call_soon_threadsafe(listener.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(PROMPT)
        loop.close()


def busy_listener(directory: Path) -> socket.socket:
    """A listener's socket that reads nothing until the test reads it."""
    directory.mkdir(mode=0o700, exist_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(directory / "1-busy.sock"))
    sock.settimeout(PROMPT)
    return sock
