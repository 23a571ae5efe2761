"""Serializer fields that refuse what DRF would quietly coerce.

DRF's CharField turns ``42`` into ``"42"``; for an API whose clients are
programs, a number where a string belongs is a bug in the client that
should be reported, not papered over.
"""

import re
from typing import Any

from rest_framework import serializers
from rest_framework.validators import ProhibitSurrogateCharactersValidator

from common import limits

_SURROGATE = re.compile(r"[\ud800-\udfff]")


class FastProhibitSurrogateCharactersValidator(ProhibitSurrogateCharactersValidator):
    """DRF's check, same message and code, by a regex search instead of a Python
    loop over every character: 0.05 ms instead of 0.5 ms for a 16 KiB body."""

    def __call__(self, value: Any) -> None:
        text = str(value)
        if text.isascii():
            return
        found = _SURROGATE.search(text)
        if found is not None:
            message = self.message.format(code_point=ord(found.group()))
            raise serializers.ValidationError(message, code=self.code)


class StrictCharField(serializers.CharField):
    """A string as sent: never a number turned into one, never trimmed (``" bob "``
    is not ``bob``; SPEC §2)."""

    default_error_messages = {"invalid": "Must be a string."}

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)
        self.validators = [
            FastProhibitSurrogateCharactersValidator()
            if type(v) is ProhibitSurrogateCharactersValidator
            else v
            for v in self.validators
        ]

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictRegexField(serializers.RegexField):
    """A string matching a pattern, as sent (not trimmed)."""

    def __init__(self, regex: str, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(regex, **kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            raise serializers.ValidationError("Must be a string.", code="invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """Only JSON true/false in a body: no "true", 1 or "yes" guessing (SPEC §2)."""

    def to_internal_value(self, data):
        if isinstance(data, bool):
            return data
        self.fail("invalid", input=data)


class QueryBooleanField(StrictBooleanField):
    """A boolean in a query string, where every value is text: the words true and false.

    An MCP tool passes the same argument as a JSON boolean, which this takes too.
    """

    def to_internal_value(self, data):
        if isinstance(data, str) and data.lower() in {"true", "false"}:
            return data.lower() == "true"
        return super().to_internal_value(data)


# The range of a signed 64-bit column (SQLite INTEGER, PostgreSQL bigint).
MIN_BIGINT = -(2**63)
MAX_BIGINT = 2**63 - 1


class StrictIntegerField(serializers.IntegerField):
    """Whole JSON numbers only; a string such as "5" in a JSON body is refused.

    Bounded to a 64-bit column unless told otherwise: a larger number compared
    against one fails in the database driver (SQLite's "Python int too large to
    convert", PostgreSQL's "out of range"), which would be a 500, not a 400.
    """

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("min_value", MIN_BIGINT)
        kwargs.setdefault("max_value", MAX_BIGINT)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class WaitField(serializers.FloatField):
    """``wait``: seconds a long-poll may hold, 0 (the default: answer at once) to
    ``limits.WAIT_MAX``. The one definition for every call that waits, so the
    REST parameters and the MCP arguments built from them cannot drift."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("min_value", 0)
        kwargs.setdefault("max_value", limits.WAIT_MAX)
        kwargs.setdefault("required", False)
        kwargs.setdefault("default", 0)
        super().__init__(**kwargs)
