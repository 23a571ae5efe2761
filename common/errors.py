"""One error shape for the whole API: ``{"error": {"code", "message", "details"}}``.

Domain errors subclass :class:`PlumbError` with a stable ``code`` and HTTP
``status``; services raise them, and the exception handler renders them. DRF's
and Django's own exceptions are translated here too, so a client never has to
parse two shapes. Codes are added, never renamed: clients branch on them.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.http import Http404, JsonResponse
from rest_framework import exceptions as drf
from rest_framework.response import Response

logger = logging.getLogger("plumb.errors")


class PlumbError(Exception):
    """Base of every domain error; subclasses set ``code``, ``status`` and ``message``.

    ``data_fields`` names the keys of ``details`` that every raise of the
    error carries (as Zulip's ``JsonableError.data_fields``), each given as a
    keyword at the raise: clients may rely on one shape per error class, and
    the OpenAPI document lists them (``common.schema.error_responses``).
    """

    code = "error"
    status = 400
    message = "The request could not be completed."
    data_fields: tuple[str, ...] = ()

    def __init__(self, message: str | None = None, **data: Any):
        if set(data) != set(self.data_fields):
            raise TypeError(
                f"{type(self).__name__} carries {list(self.data_fields)} in its details, "
                f"not {sorted(data)}"
            )
        self.message = message or self.message
        self.details: dict[str, Any] = data
        super().__init__(self.message)

    def as_dict(self) -> dict[str, Any]:
        return error_body(self.code, self.message, self.details)

    def headers(self, now: float) -> dict[str, str]:
        """HTTP headers the refusal carries (``Retry-After``), given the time as a Unix time."""
        return {}


class ValidationFailed(PlumbError):
    """Invalid input: ``details`` holds messages per field, as DRF's validation errors do."""

    code = "validation_error"
    status = 400
    message = "The request has invalid fields."

    def __init__(self, message: str | None = None, *, fields: dict[str, Any] | None = None):
        super().__init__(message)
        self.details = dict(fields or {})

    @classmethod
    def field(cls, name: str, problem: str, message: str | None = None) -> ValidationFailed:
        """One field's problem; the message says ``name: problem`` unless given."""
        return cls(message or f"{name}: {problem}", fields={name: [problem]})


class BodyTooLarge(PlumbError):
    code = "body_too_large"
    status = 413
    message = "The body is larger than the limit."
    data_fields = ("body", "size")


class StoredBodyTooLarge(BodyTooLarge):
    """Under the limit as sent, over it once secrets are redacted (SPEC §3.2)."""

    data_fields = ("body", "stored_bytes")


class NotFound(PlumbError):
    code = "not_found"
    status = 404
    message = "Nothing exists at this address."


class Conflict(PlumbError):
    code = "conflict"
    status = 409
    message = "The request conflicts with the current state."


class Forbidden(PlumbError):
    code = "forbidden"
    status = 403
    message = "You may not do this."


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def error_response(status: int, code: str, message: str, details: dict | None = None):
    """A plain Django JSON error, for the places DRF's handler never sees."""
    return JsonResponse(error_body(code, message, details), status=status)


def plain_error_response(exc: Exception) -> JsonResponse:
    """What ``exception_handler`` answers for ``exc``, as a plain Django response.

    For views outside DRF that raise through the same rules (``/metrics``).
    """
    answer = exception_handler(exc, {"view": None})
    response = JsonResponse(answer.data, status=answer.status_code)
    for header in ("Retry-After", "WWW-Authenticate"):
        if answer.has_header(header):
            response[header] = answer[header]
    return response


def retry_after(wait: float) -> int:
    """Whole seconds for ``Retry-After``, rounded up and never 0 (a client would retry at once)."""
    return max(1, int(wait + 0.999))


# DRF exception class -> (stable code, message). Checked in order (subclasses first).
_DRF_CODES: list[tuple[type[drf.APIException], str, str | None]] = [
    (drf.NotAuthenticated, "not_authenticated", "Authentication credentials were not provided."),
    (drf.AuthenticationFailed, "authentication_failed", None),
    (drf.PermissionDenied, "permission_denied", None),
    (drf.NotFound, "not_found", "Nothing exists at this address."),
    (drf.MethodNotAllowed, "method_not_allowed", None),
    (drf.NotAcceptable, "not_acceptable", None),
    (drf.UnsupportedMediaType, "unsupported_media_type", None),
    (drf.ParseError, "invalid_json", None),
    (drf.Throttled, "throttled", "Too many requests; retry after the delay in Retry-After."),
]


def _flatten_validation(detail: Any) -> dict[str, Any]:
    """Per-field messages as plain strings (or nested dicts/lists for nested input)."""
    if isinstance(detail, dict):
        return {str(key): _flatten_validation(value) for key, value in detail.items()}
    if isinstance(detail, list):
        return [_flatten_validation(item) for item in detail]  # type: ignore[return-value]
    return str(detail)


def _first_message(details: dict[str, Any]) -> str:
    for field, messages in details.items():
        first = messages[0] if isinstance(messages, list) and messages else messages
        if isinstance(first, str):
            return first if field == "non_field_errors" else f"{field}: {first}"
    return ValidationFailed.message


def exception_handler(exc: Exception, context: dict) -> Response:
    """DRF's EXCEPTION_HANDLER: every failure becomes the one error shape."""
    headers: dict[str, str] = {}
    if isinstance(exc, PlumbError):
        return Response(exc.as_dict(), status=exc.status, headers=exc.headers(time.time()))
    if isinstance(exc, drf.ValidationError):
        details = _flatten_validation(exc.detail)
        if not isinstance(details, dict):
            details = {"non_field_errors": details if isinstance(details, list) else [details]}
        return Response(
            error_body("validation_error", _first_message(details), details), status=400
        )
    if isinstance(exc, Http404):
        exc = drf.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = drf.PermissionDenied()
    elif isinstance(exc, RequestDataTooBig):
        return Response(
            error_body("request_too_large", "The request body is larger than the server accepts."),
            status=413,
        )
    elif isinstance(exc, SuspiciousOperation):
        return Response(error_body("bad_request", "The request was malformed."), status=400)

    if isinstance(exc, drf.APIException):
        if getattr(exc, "auth_header", None):
            headers["WWW-Authenticate"] = exc.auth_header
        if getattr(exc, "wait", None) is not None:
            headers["Retry-After"] = str(retry_after(exc.wait))
        details: dict[str, Any] = {}
        code, message = None, None
        for cls, mapped, default_message in _DRF_CODES:
            if isinstance(exc, cls):
                code, message = mapped, default_message
                break
        detail_code = getattr(exc.detail, "code", None)
        if isinstance(exc, drf.AuthenticationFailed) and detail_code not in (
            None,
            "authentication_failed",
        ):
            # Our authentication classes name the precise reason in the code.
            code = detail_code
        if code is None:
            code = detail_code or "error"
        if message is None:
            message = (
                str(exc.detail) if not isinstance(exc.detail, dict | list) else exc.default_detail
            )
        if isinstance(exc, drf.Throttled) and exc.wait is not None:
            details["retry_after"] = int(headers["Retry-After"])
        response = Response(error_body(code, str(message), details), status=exc.status_code)
        for name, value in headers.items():
            response[name] = value
        return response

    logger.exception("Unhandled error in %s", context.get("view").__class__.__name__)
    return Response(
        error_body("internal_error", "The server failed to handle this request."), status=500
    )
