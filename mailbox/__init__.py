"""The identity app and the mailbox: projects, keys, workspaces, names, sessions and notes.

Second floor, on ``common``. Every other app builds on its identity layer;
it imports ``common`` and libraries only, never ``rooms`` and never
``plumb_site`` (``tests/test_layout.py``).

* ``models``, ``services/`` (every state change), ``selectors`` (reads that
  apply visibility), ``errors``, ``credentials`` (key and token hashing),
  ``wakeups`` (the one waiting rule of every long-poll), ``representation`` (the JSON of notes,
  sessions and threads), ``transcripts`` (conversation pages for staff) and
  ``signals`` (what it announces to the floor above: ``optin_revoked``,
  which ``rooms`` answers, since ``mailbox`` may not call into it);
* ``api/``: session authentication, throttles, the base API view and the
  one response envelope (``notes`` + ``schema_stale``), which ``rooms.api``
  and the MCP door build on, then the mailbox's own endpoints;
* ``admin/``: the operators' and moderators' pages for this app. The
  ``plumb`` command lives in ``rooms`` (it needs both apps' services).

Only URL confs, ``plumb_site``, tests and ``rooms.api`` / ``rooms.admin``
import ``mailbox.api`` and ``mailbox.admin``.
"""
