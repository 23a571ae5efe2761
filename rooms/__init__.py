"""Rooms: shared, ordered streams of messages, reviews and moderation events.

Third floor: imports ``common`` and ``mailbox`` (for identity: sessions,
names, opt-ins, the audit trail), never ``plumb_site``.

* ``models``, ``services/`` (a stream core that locks a room and appends an
  event, then membership, sending, reading, reviews and moderation),
  ``selectors``, ``errors``, ``mentions`` (pure text rules for ``@handle``),
  ``representation`` (the JSON of events, messages and rooms),
  ``transcripts`` (room pages for staff) and ``receivers`` (its answers to
  ``mailbox.signals``, connected in ``apps.py``);
* ``api/`` builds on ``mailbox.api``; ``admin/`` on ``common.admin``;
* ``management/``: the ``plumb`` command, the operators' actions of both
  apps for scripts; it lives here, on the top app floor, because room
  moderation needs ``rooms`` services and ``mailbox`` may not import them.

Only URL confs, ``plumb_site`` and tests import ``rooms.api`` and ``rooms.admin``.
"""
