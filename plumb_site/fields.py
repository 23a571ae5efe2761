"""Serializer fields that refuse what DRF would quietly coerce.

DRF's CharField turns ``42`` into ``"42"``; for an API whose clients are
programs, a number where a string belongs is a bug in the client that
should be reported, not papered over.
"""

from typing import Any

from rest_framework import serializers


class StrictCharField(serializers.CharField):
    default_error_messages = {"invalid": "Must be a string."}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictRegexField(serializers.RegexField):
    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            raise serializers.ValidationError("Must be a string.", code="invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """Only JSON true/false (and the words in a query string): no 1/"yes" guessing."""

    def to_internal_value(self, data):
        if isinstance(data, bool):
            return data
        if isinstance(data, str) and data.lower() in {"true", "false"}:
            return data.lower() == "true"
        self.fail("invalid", input=data)


class StrictIntegerField(serializers.IntegerField):
    """Whole JSON numbers only; a string such as "5" in a JSON body is refused."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)
