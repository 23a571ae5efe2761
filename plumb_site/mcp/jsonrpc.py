"""JSON-RPC 2.0 as plumb's MCP endpoint speaks it: error codes, replies, refusals.

Apart from ``protocol`` so that the server's front (``plumb_site/asgi.py``,
``plumb_site/wsgi.py``) can answer the MCP endpoint in its own shape before
Django is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from common.errors import error_body

ENDPOINT = "/mcp"

# JSON-RPC 2.0 codes, and those the MCP specification allocates.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
HEADER_MISMATCH = -32020
UNSUPPORTED_PROTOCOL_VERSION = -32022
# plumb's own, outside the reserved range: the request was refused the way
# REST refuses it (authentication, rate limit, identity); ``data`` is the
# REST error object, ``{"error": {"code", "message", "details"}}``.
REFUSED = -31000


@dataclass
class Reply:
    """What to answer over HTTP: a status, a JSON body (or none) and extra headers.

    ``operation`` and ``tool_status`` are what the request metrics count it
    as (``metrics.label_request``): one URL serves every tool, and a tool's
    domain error is a 200 HTTP response that stands for its REST status.
    """

    status: int
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    operation: str | None = None
    tool_status: int | None = None


class RpcError(Exception):
    def __init__(self, code: int, message: str, *, status: int = 200, data: Any = None):
        super().__init__(message)
        self.code, self.message, self.status, self.data = code, message, status, data


def error_reply(
    status: int, code: int, message: str, *, request_id: Any = None, data: Any = None
) -> Reply:
    """A JSON-RPC error response; without ``id`` when the request's id is unknown."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    body: dict[str, Any] = {"jsonrpc": "2.0"}
    if request_id is not None:
        body["id"] = request_id
    body["error"] = error
    return Reply(status, body)


def refused_before_reading(path: str, status: int, code: str, message: str) -> dict[str, Any]:
    """The body of a refusal the server makes before a request reaches a view (a body
    too large or too slow): JSON-RPC for the MCP endpoint, whose clients parse
    nothing else, with the REST error object as its data; the REST shape elsewhere."""
    rest = error_body(code, message)
    if path.rstrip("/") != ENDPOINT:
        return rest
    return error_reply(status, INVALID_REQUEST, message, data=rest).body
