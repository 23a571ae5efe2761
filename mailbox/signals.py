"""What the mailbox floor announces to the floors above it.

``rooms`` builds on ``mailbox`` and ``mailbox`` never imports ``rooms``
(docs/internals.md, "Where things live"), yet some mailbox changes must reach rooms in
the same transaction. Revoking an opt-in is one: the other project's members
must leave this project's rooms at once (SPEC §5). So the lower floor
announces the change and the upper floor reacts, without an arrow pointing
up. These are not model ``save()`` signals (which STYLE keeps free of domain
logic): each is sent explicitly by one service, at one documented point of
its transaction, and each receiver only calls a service of its own app.

Receivers run inside the sender's transaction, through ``Signal.send``: what
they write commits or rolls back with the change they react to, and an
exception they raise undoes it.
"""

from django.dispatch import Signal

# Sent by ``mailbox.services.optin_revoke`` after the opt-in row is deleted,
# before its transaction commits, with keyword arguments ``project`` (the
# project that stopped accepting), ``source`` (the project it stopped
# accepting, or ``None`` when ``project_update`` turned ``accept_all_projects``
# off: every project it has no opt-in for) and ``actor`` (the operator, as the
# audit trail names them). ``rooms`` removes those members from ``project``'s rooms.
optin_revoked = Signal()
