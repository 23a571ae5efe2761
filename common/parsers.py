"""A JSON parser that refuses what the standard one lets through.

Python's json module accepts input that later breaks storage or rendering:
lone surrogates (SQLite and PostgreSQL refuse them), NaN and Infinity, and
nesting deep enough to exhaust the stack. Every request body must also be a
JSON object (SPEC §2), so anything else is refused here, once, for every view.
"""

import functools
import json
import math
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.utils.http import parse_header_parameters
from rest_framework.exceptions import ParseError, UnsupportedMediaType
from rest_framework.parsers import BaseParser

MAX_DEPTH = 32


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def check_json_value(value: Any) -> None:
    """Refuse lone surrogates and excessive nesting anywhere in a parsed document."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ParseError(f"JSON nested deeper than {MAX_DEPTH} levels.")
        if isinstance(item, str):
            _check_text(item)
        elif isinstance(item, dict):
            for key, child in item.items():
                _check_text(key)
                stack.append((child, depth + 1))
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ParseError("JSON strings must not contain lone surrogate escapes.") from None


class StrictJSONParser(BaseParser):
    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None) -> dict[str, Any]:
        _check_charset(media_type)
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        # Django enforces the upload limit only on request.body / request.POST;
        # DRF reads the stream, so the limit is applied here.
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise RequestDataTooBig("The request body exceeds DATA_UPLOAD_MAX_MEMORY_SIZE.")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ParseError("The request body is not valid UTF-8.") from None
        if text.strip() == "":
            # An empty body on a POST means "no fields"; views validate what they need.
            return {}
        try:
            data = _DECODER.decode(text)
        except RecursionError:
            raise ParseError(f"JSON nested deeper than {MAX_DEPTH} levels.") from None
        except ValueError as exc:
            raise ParseError(f"The request body is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ParseError("The request body must be a JSON object.")
        check_json_value(data)
        return data


def _check_charset(media_type: str | None) -> None:
    """JSON is UTF-8 (RFC 8259 §8.1); a client-chosen codec must not pick our decoder."""
    if _charset(media_type or "") not in {"utf-8", "utf8"}:
        raise UnsupportedMediaType(media_type, detail="JSON bodies must be UTF-8 encoded.")


@functools.lru_cache(maxsize=64)
def _charset(media_type: str) -> str:
    """The charset a Content-Type names: clients send the same one call after call."""
    _, params = parse_header_parameters(media_type)
    return params.get("charset", "utf-8").strip().lower()


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} is out of range")
    return value


# json.loads with these hooks would make a decoder (and its scanner) for every body.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)
