"""The admin of plumb: operators run projects, keys and opt-ins here; moderators
moderate rooms and conversations and read the audit trail (SPEC §5).

Split by entity; importing the package registers every model admin:

* ``identity``: projects (collab settings, opt-ins inline), opt-ins, keys,
  workspaces, agent names, sessions. Superusers and operators only;
* ``conversations``: conversations with their notes and transcripts;
* ``audit``: the audit trail, read-only;
* ``actions``: the "action with a reason" confirmation shared with ``rooms.admin``;
* ``pages``: tool buttons on change pages, changelist titles, badges;
* ``paging``: changelists of ever-growing tables, without full counts.

The rooms' admin lives in ``rooms/admin.py``. The ``moderators`` group (data
migration ``rooms/0003``) holds view and change permissions on rooms, members,
messages, conversations and view on events, notes and audit records, and no
permission on the identity models, so Django's own permission checks keep
those pages out of its index and answer 403 on them.
"""

from django.contrib import admin

from mailbox.admin import audit, conversations, identity

admin.site.site_header = "plumb"
admin.site.site_title = "plumb admin"
admin.site.index_title = "Operations"
# plumb serves no site of its own beside the API: no "View site" link.
admin.site.site_url = None

__all__ = ["audit", "conversations", "identity"]
