"""The ``plumb`` command's parts, one module per group of actions.

``plumb_site/management/commands/plumb.py`` builds one argument parser from them
and dispatches; each module adds its groups (``add_parsers``) and holds their
handlers. A handler only translates: arguments become service calls (writes)
and selector calls (listings), results become lines of text. Every rule
lives in ``mailbox.services`` and ``rooms.services``, so the admin, the API
and this command cannot disagree.

* ``text``: parsing helpers, the operator's name and the listing format;
* ``identity``: projects, workspaces, project keys, opt-ins, bootstrap;
* ``moderation``: rooms, messages, members and conversations, and the
  listings of rooms, messages and notes that show their ids;
* ``sessions``: sessions and the audit trail;
* ``connect``: an MCP client's configuration for one agent.
"""
