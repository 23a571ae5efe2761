"""Hold silent connections open, in a process of its own (tests/scale/test_connections.py).

    python -m tests.scale.silent_clients HOST PORT SOURCE COUNT

Opens COUNT connections from the loopback address SOURCE to HOST:PORT and
sends nothing on them. Once every connection is tried it prints
``opened N failed M``, then holds them until its stdin closes.

Why a process of its own: the test needs more sockets than one process may
open on many machines, and the open-file limit is per process. Each helper
raises its soft limit up to its hard limit, which needs no privilege. Why its
own source address: a client port is unique per source address and
destination, so helpers on 127.0.0.2, 127.0.0.3, … each draw on a whole
ephemeral port range rather than all sharing 127.0.0.1's.
"""

from __future__ import annotations

import resource
import socket
import sys

CONNECT_TIMEOUT = 5.0  # seconds; a server that stops accepting fails connections, not the run
SPARE_FILES = 64  # the interpreter's own files


def raise_file_limit(wanted: int) -> int:
    """Raise this process's soft open-file limit towards ``wanted``; the limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return wanted
    new_soft = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (new_soft, hard))
    return new_soft


def main() -> None:
    host, port, source, count = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    raise_file_limit(count + SPARE_FILES)
    held: list[socket.socket] = []
    failed = 0
    for _ in range(count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.settimeout(CONNECT_TIMEOUT)
            sock.bind((source, 0))
            sock.connect((host, port))
        except OSError:
            sock.close()
            failed += 1
            continue
        held.append(sock)
    print(f"opened {len(held)} failed {failed}", flush=True)
    sys.stdin.read()  # hold them until the test closes our stdin
    for sock in held:
        sock.close()


if __name__ == "__main__":
    main()
