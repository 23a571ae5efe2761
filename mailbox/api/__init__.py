"""The mailbox's REST door, and the base every JSON endpoint stands on.

``auth`` (bearer authentication for keys and session tokens), ``throttles``,
``base`` (the API views), ``envelope`` (``notes`` and ``schema_stale`` on
every session reply, shared with the MCP tools); then ``serializers``,
``views`` and ``urls`` of the mailbox's own endpoints.
"""
