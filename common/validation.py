"""Input validation with DRF serializers, without building one per request.

A serializer instance deep-copies its declared fields when first asked for
them, about a tenth of a cheap call's CPU if done per request. ``validated`` keeps
one instance per input serializer class and runs its ``run_validation``,
which holds no per-call state on the instance, so concurrent threads can
share it. Errors are the ``ValidationError`` that ``is_valid`` would raise.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from rest_framework import serializers

from common import limits
from common.fields import StrictCharField

UNKNOWN_FIELD = "Unknown field."
# What clients call their copy of the schema's fingerprint in bodies, query
# strings and tool arguments (SPEC §2). Every call may send it; it is read
# apart (``schema_stale``), so validated input never carries it on.
FINGERPRINT_FIELD = "tool_schema_fingerprint"

_instances: dict[type[serializers.Serializer], serializers.Serializer] = {}
_lock = threading.Lock()


def validated(serializer_class: type[serializers.Serializer], data: Any) -> dict[str, Any]:
    """``serializer_class(data=data)``'s validated data, without the schema fingerprint;
    raises its ``ValidationError``."""
    serializer = _instances.get(serializer_class)
    if serializer is None:
        with _lock:
            serializer = _instances.setdefault(serializer_class, serializer_class())
            serializer.fields  # noqa: B018 -- bind the fields once, under the lock
    fields = dict(serializer.run_validation(data))
    fields.pop(FINGERPRINT_FIELD, None)
    return fields


class BodyInput(serializers.Serializer):
    """Base of every JSON body's input serializer: a field it does not declare is refused.

    DRF drops undeclared fields silently, so a typo (``requireRead`` for
    ``require_read``) would post as if the option were absent. SPEC §2 wants
    ``validation_error`` naming each unknown field instead, reported together
    with any invalid known field. Query-string inputs do not inherit this:
    the rule is for bodies. Every session call may carry the fingerprint.
    """

    tool_schema_fingerprint = StrictCharField(required=False, max_length=limits.FINGERPRINT_MAX)

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        unknown: dict[str, list[str]] = {}
        if isinstance(data, Mapping):
            unknown = {str(key): [UNKNOWN_FIELD] for key in data if key not in self.fields}
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if unknown and isinstance(exc.detail, dict):
                raise serializers.ValidationError({**exc.detail, **unknown}) from None
            raise
        if unknown:
            raise serializers.ValidationError(unknown)
        return value


class NoFieldsInput(BodyInput):
    """The body of a call that takes no fields of its own (leave a room, end a session)."""
