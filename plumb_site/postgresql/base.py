"""The backend: Django's, whose ``is_usable`` asks the socket first (see the package)."""

from __future__ import annotations

import select

from django.db.backends.postgresql import base
from psycopg.pq import TransactionStatus


class DatabaseWrapper(base.DatabaseWrapper):
    def is_usable(self) -> bool:
        connection = self.connection
        if connection is None or connection.closed:
            return False
        if self.errors_occurred or connection.info.transaction_status != TransactionStatus.IDLE:
            return super().is_usable()
        # poll, not select: a process holding many client sockets has descriptors past
        # select's limit. Any event at all (data, hang-up, error) is for SELECT 1 to judge.
        watch = select.poll()
        try:
            watch.register(connection.fileno(), select.POLLIN)
            quiet = not watch.poll(0)
        except (OSError, ValueError):
            return False
        return quiet or super().is_usable()
