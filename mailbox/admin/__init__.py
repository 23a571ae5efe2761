"""The admin of plumb: operators run projects, keys and opt-ins here; moderators
moderate rooms and conversations and read the audit trail (SPEC §5).

Split by entity; importing the package registers every model admin:

* ``projects``: projects (collab settings, opt-ins inline) and opt-ins;
* ``keys``: project keys, issued once, relabelled and revoked;
* ``workspaces``: workspaces, agent names and sessions;
* ``base``: what those three share: saving through the services and showing
  their errors, a fixed-text widget, the project filters;
* ``conversations``: conversations with their notes and transcripts;
* ``audit``: the audit trail, read-only.

Projects, opt-ins, keys, workspaces, names and sessions are for superusers and
operators only. The admin kit these modules and ``rooms.admin`` build on (the
"action with a reason" confirmation, tool buttons and badges, changelists of
ever-growing tables) lives in ``common/admin/``.

The rooms' admin lives in ``rooms/admin/``. The ``moderators`` group (data
migration ``rooms/0003``) holds view and change permissions on rooms, members,
messages, conversations and view on events, notes and audit records, and no
permission on the identity models, so Django's own permission checks keep
those pages out of its index and answer 403 on them.
"""

from django.contrib import admin

from mailbox.admin import audit, base, conversations, keys, projects, workspaces

admin.site.site_header = "plumb"
admin.site.site_title = "plumb admin"
admin.site.index_title = "Operations"
# plumb serves no site of its own beside the API: no "View site" link.
admin.site.site_url = None

__all__ = ["audit", "base", "conversations", "keys", "projects", "workspaces"]
