"""Input validation with DRF serializers, without building one per request.

A serializer instance deep-copies its declared fields when first asked for
them, about a tenth of a cheap call's CPU if done per request. ``validated`` keeps
one instance per input serializer class and runs its ``run_validation``,
which holds no per-call state on the instance, so concurrent threads can
share it. Errors are the ``ValidationError`` that ``is_valid`` would raise.

An optional field left out of a JSON body (most of a send's) costs DRF a
``SkipField`` raised through three of its methods and caught, and contributes
nothing: no value, no error, no ``validate_<field>`` call. So a body missing
such fields is validated by an instance without them, one per class and set
of fields left out (a handful), and DRF's own loop runs over the rest. Only
fields whose handling of a missing value is DRF's base ``Field``'s (or
``CharField``'s, which hands it on) are left out, and only for a plain
``dict``: a ``QueryDict`` reads missing fields as HTML forms do.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from rest_framework import fields as drf_fields
from rest_framework import serializers

from common import limits
from common.fields import StrictCharField

UNKNOWN_FIELD = "Unknown field."
# What clients call their copy of the schema's fingerprint in bodies, query
# strings and tool arguments (SPEC §2). Every call may send it; it is read
# apart (``schema_stale``), so validated input never carries it on.
FINGERPRINT_FIELD = "tool_schema_fingerprint"

_Key = tuple[type[serializers.Serializer], tuple[str, ...]]
# Per class and fields left out: the instance that validates without them.
_instances: dict[_Key, serializers.Serializer] = {}
# Per class: the fields a plain dict may leave out at no cost (``_skipped_when_missing``).
_optional: dict[type[serializers.Serializer], tuple[str, ...]] = {}
_lock = threading.Lock()


def validated(serializer_class: type[serializers.Serializer], data: Any) -> dict[str, Any]:
    """``serializer_class(data=data)``'s validated data, without the schema fingerprint;
    raises its ``ValidationError``."""
    optional = _optional.get(serializer_class)
    if optional is None:
        optional = _optional_fields(serializer_class)
    missing = (
        tuple(name for name in optional if name not in data)
        if optional and type(data) is dict
        else ()
    )
    serializer = _instances.get((serializer_class, missing))
    if serializer is None:
        serializer = _instance(serializer_class, missing)
    fields = dict(serializer.run_validation(data))
    fields.pop(FINGERPRINT_FIELD, None)
    return fields


def _instance(
    serializer_class: type[serializers.Serializer], missing: tuple[str, ...]
) -> serializers.Serializer:
    """The shared instance of ``serializer_class`` without the fields ``missing``."""
    with _lock:
        serializer = _instances.get((serializer_class, missing))
        if serializer is None:
            serializer = serializer_class()
            fields = serializer.fields  # bound once, under the lock
            for name in missing:
                del fields[name]
            _instances[(serializer_class, missing)] = serializer
    return serializer


def _optional_fields(serializer_class: type[serializers.Serializer]) -> tuple[str, ...]:
    """The fields of ``serializer_class`` that a plain dict may leave out at no cost."""
    with _lock:
        found = _optional.get(serializer_class)
        if found is None:
            whole = serializer_class()
            found = tuple(
                name for name, field in whole.fields.items() if _skipped_when_missing(field)
            )
            _optional[serializer_class] = found
    return found


# DRF's run_validation of a CharField hands a missing value (``empty``) on to Field's.
_RUNS_AS_FIELD = (drf_fields.Field.run_validation, drf_fields.CharField.run_validation)


def _skipped_when_missing(field: drf_fields.Field) -> bool:
    """Whether DRF raises ``SkipField`` for ``field`` whenever a plain dict lacks it.

    ``get_value`` gives ``empty``; ``run_validation`` hands it to
    ``validate_empty_values``, which (not partial, not required, not
    read-only) asks ``get_default``, which raises for a field without a
    default. A class that changes any of those steps is validated whole.
    """
    kind = type(field)
    return (
        not field.read_only
        and not field.required
        and field.default is drf_fields.empty
        and kind.get_value is drf_fields.Field.get_value
        and kind.validate_empty_values is drf_fields.Field.validate_empty_values
        and kind.get_default is drf_fields.Field.get_default
        and kind.run_validation in _RUNS_AS_FIELD
    )


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
