"""``POST /mcp``: streamable HTTP with JSON responses, one plain synchronous view.

Everything here is HTTP: which origins and methods are accepted, how large a
body may be, how it parses. What the JSON-RPC message means is ``protocol``'s
business. Every answer is JSON (a JSON-RPC response or error) or ``202`` with
an empty body, so the API error middleware never rewrites it.
"""

from __future__ import annotations

import json
import math
from typing import Any, NoReturn
from urllib.parse import urlsplit

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework.exceptions import ParseError

from common import metrics
from common.parsers import MAX_DEPTH, check_json_value
from plumb_site.mcp import jsonrpc, protocol

LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]"})


@csrf_exempt  # no cookies are read here: a bearer credential authenticates every request
def endpoint(request: HttpRequest) -> HttpResponse:
    if not origin_allowed(request.headers.get("Origin")):
        # A browser page on another origin must not drive a local server (DNS rebinding).
        return _http(
            jsonrpc.error_reply(403, jsonrpc.INVALID_REQUEST, "This Origin is not allowed.")
        )
    if request.method != "POST":
        reply = jsonrpc.error_reply(
            405, jsonrpc.INVALID_REQUEST, "Send JSON-RPC messages with POST; nothing else here."
        )
        reply.headers["Allow"] = "POST"
        return _http(reply)
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    declared = request.META.get("CONTENT_LENGTH") or "0"
    if not declared.isdigit():
        return _http(jsonrpc.error_reply(400, jsonrpc.INVALID_REQUEST, "Bad Content-Length."))
    if int(declared) > limit:
        return _http(_too_large(limit))
    charset = request.content_params.get("charset", "utf-8").lower()
    if request.content_type != "application/json" or charset not in {"utf-8", "utf8"}:
        return _http(
            jsonrpc.error_reply(
                415, jsonrpc.INVALID_REQUEST, "Send a UTF-8 JSON body (application/json)."
            )
        )
    raw = request.read(limit + 1)
    if len(raw) > limit:
        return _http(_too_large(limit))
    try:
        message = _parse(raw)
    except ValueError as exc:
        return _http(jsonrpc.error_reply(400, jsonrpc.PARSE_ERROR, f"Parse error: {exc}"))
    reply = protocol.handle(request, message)
    metrics.label_request(request, operation=reply.operation, status=reply.tool_status)
    return _http(reply)


def origin_allowed(origin: str | None) -> bool:
    """No Origin (not a browser), a local page, or an origin the operator trusts."""
    if origin is None:
        return True
    if origin in settings.CSRF_TRUSTED_ORIGINS:
        return True
    try:
        parts = urlsplit(origin)
        parts.port  # noqa: B018 - raises ValueError for a malformed port
    except ValueError:
        return False
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return parts.scheme in {"http", "https"} and host in LOCAL_HOSTS


def _too_large(limit: int) -> jsonrpc.Reply:
    return jsonrpc.error_reply(
        413, jsonrpc.INVALID_REQUEST, f"The request body is larger than {limit} bytes."
    )


def _parse(raw: bytes) -> Any:
    """Parse strictly, as the REST API does: UTF-8, no NaN, no lone surrogates, bounded depth."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("the body is not valid UTF-8") from None
    try:
        message = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError:
        raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels") from None
    try:
        check_json_value(message)
    except ParseError as exc:
        raise ValueError(str(exc.detail)) from None
    return message


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} is out of range")
    return value


def _http(reply: jsonrpc.Reply) -> HttpResponse:
    if reply.body is None:
        response = HttpResponse(status=reply.status)
        del response["Content-Type"]
    else:
        response = HttpResponse(
            json.dumps(reply.body, cls=DjangoJSONEncoder, ensure_ascii=False),
            status=reply.status,
            content_type="application/json",
        )
    for name, value in reply.headers.items():
        response[name] = value
    return response
