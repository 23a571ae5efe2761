"""plumb's tools over the Model Context Protocol (SPEC §6), at ``POST /mcp``.

``views`` is the HTTP endpoint, ``protocol`` the JSON-RPC methods of both
protocol eras, ``identity`` who a request acts as, ``tools`` the tool calls
(thin calls into the same services and serializers as the REST API) and
``schemas`` the published tool list. The package is deliberately not a
top-level ``mcp`` module: that name belongs to the official SDK.
"""
