"""OpenAPI helpers: the error shape, documented on every operation, and the fingerprint.

Views list the domain errors they raise with :func:`error_responses`; the
postprocessing hook adds the errors any operation can answer (malformed
body, authentication, rate limit), so the published schema is complete.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import defaultdict

from django.conf import settings
from django.utils.module_loading import import_string
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.utils import OpenApiResponse, inline_serializer
from rest_framework import serializers

from common.errors import PlumbError

ErrorSerializer = inline_serializer(
    name="Error",
    fields={
        "error": inline_serializer(
            name="ErrorBody",
            fields={
                "code": serializers.CharField(help_text="Stable machine-readable code."),
                "message": serializers.CharField(help_text="One human sentence."),
                "details": serializers.DictField(help_text="Per-field messages or context."),
            },
        )
    },
)


def error_responses(*errors: type[PlumbError]) -> dict[int, OpenApiResponse]:
    """Group domain errors by HTTP status for ``extend_schema(responses=...)``, each
    code with the ``details`` its class declares."""
    by_status: dict[int, list[str]] = defaultdict(list)
    for error in errors:
        fields = f" (details: {', '.join(error.data_fields)})" if error.data_fields else ""
        by_status[error.status].append(error.code + fields)
    return {
        status: OpenApiResponse(ErrorSerializer, description="Error codes: " + ", ".join(codes))
        for status, codes in sorted(by_status.items())
    }


_COMMON = {
    "400": "invalid_json, validation_error",
    "413": "request_too_large",
    "415": "unsupported_media_type",
}
_AUTHENTICATED = {
    "401": (
        "not_authenticated, invalid_token, session_token_required, project_key_required, "
        "key_revoked, session_ended, session_expired"
    ),
    "429": "throttled",
}
_ERROR_REF = {"$ref": "#/components/schemas/Error"}


def add_error_responses(result: dict, generator, request, public) -> dict:
    """drf-spectacular postprocessing hook: document the errors every operation shares."""
    for path_item in result.get("paths", {}).values():
        for method, operation in path_item.items():
            if method not in {"get", "post", "put", "patch", "delete"}:
                continue
            extra = dict(_COMMON) if method in {"post", "put", "patch"} else {}
            if any(p.get("in") == "query" for p in operation.get("parameters", [])):
                # Query parameters are validated like bodies: a bad one is a 400.
                extra.setdefault("400", "validation_error")
            extra["405"] = "method_not_allowed"
            if operation.get("security") != [{}] and operation.get("security"):
                extra.update(_AUTHENTICATED)
            responses = operation.setdefault("responses", {})
            for status, codes in extra.items():
                if status in responses:
                    existing = responses[status].get("description", "")
                    responses[status]["description"] = f"{existing}; also {codes}".lstrip("; ")
                else:
                    responses[status] = {
                        "description": f"Error codes: {codes}",
                        "content": {"application/json": {"schema": _ERROR_REF}},
                    }
    return result


class ClosedBodyExtension(OpenApiSerializerExtension):
    """Request bodies refuse unknown fields (``common.validation.BodyInput``), and
    their published schemas say so with ``additionalProperties: false``."""

    target_class = "common.validation.BodyInput"
    match_subclasses = True

    def map_serializer(self, auto_schema, direction) -> dict:
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        return {**schema, "additionalProperties": False}


# --- the schema fingerprint ------------------------------------------------------------


_fingerprint_lock = threading.Lock()
_fingerprint: str | None = None


def schema_fingerprint() -> str:
    """A short hash of the published API schema and tool list, computed once per process.

    The OpenAPI document is generated here; every other published document
    (the MCP tool list) is named in ``PLUMB_PUBLISHED_SCHEMAS`` by the project's
    settings, so that the floor never imports the front doors that publish them.
    """
    global _fingerprint
    if _fingerprint is None:
        with _fingerprint_lock:
            if _fingerprint is None:
                published = {
                    name: import_string(path)
                    for name, path in settings.PLUMB_PUBLISHED_SCHEMAS.items()
                }
                published["openapi"] = SchemaGenerator().get_schema(request=None, public=True)
                canonical = json.dumps(published, sort_keys=True, default=str)
                _fingerprint = hashlib.sha256(canonical.encode()).hexdigest()[:16]
    return _fingerprint


def reset_schema_fingerprint() -> None:
    """Forget the cached fingerprint (tests that change the URL conf use it)."""
    global _fingerprint
    with _fingerprint_lock:
        _fingerprint = None


def schema_stale(fingerprint: str | None) -> dict[str, str] | None:
    """``schema_stale``'s value when a client named a fingerprint other than the server's."""
    if fingerprint and fingerprint != schema_fingerprint():
        return {"current": schema_fingerprint()}
    return None
