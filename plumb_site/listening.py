"""Where the running server listens, recorded in ``var/`` for ``plumb connect``.

The server's address is whatever gunicorn bound (``make serve HOST=… PORT=…``,
a socket handed over, several binds), and an operator asking ``plumb connect``
for an agent's configuration may sit in another shell with other variables:
so the server writes its own addresses at start (gunicorn's ``when_ready``,
in the master) and removes them at exit. A record whose process is gone (the
server was killed) is ignored.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from pathlib import Path

from django.conf import settings

# How a wildcard bind is reached from this host.
_LOCAL_FOR = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def record_path() -> Path:
    return Path(settings.VAR_DIR) / "server.json"


def url_for(address: object) -> str | None:
    """``http://host:port`` for a bound TCP address; None for a unix socket."""
    if not isinstance(address, tuple) or len(address) < 2:
        return None
    host, port = str(address[0]), int(address[1])
    host = _LOCAL_FOR.get(host, host)
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def record(sockets: list[socket.socket]) -> None:
    """Write the addresses of ``sockets`` for this process (the server's master)."""
    urls = [url for url in (url_for(s.getsockname()) for s in sockets) if url is not None]
    path = record_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps({"urls": urls, "pid": os.getpid()}))
    temporary.replace(path)  # whole or not at all, for a reader in another process


def forget() -> None:
    """Remove this process's record, if it is still this process's."""
    path = record_path()
    with contextlib.suppress(OSError, ValueError):
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()


def recorded_url() -> str | None:
    """The first address the running server recorded, or None when none runs here."""
    try:
        found = json.loads(record_path().read_text())
        pid, urls = int(found["pid"]), list(found["urls"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None  # the server that wrote it is gone
    except PermissionError:
        pass  # it runs, as another user
    return str(urls[0]) if urls else None
