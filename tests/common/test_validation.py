"""Shared serializers per input class validate as a fresh one would, fields left out or not."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from django.http import QueryDict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.validators import ProhibitSurrogateCharactersValidator

from common import validation
from common.fields import FastProhibitSurrogateCharactersValidator
from common.validation import validated
from mailbox.api import serializers as mailbox_serializers
from mailbox.api.serializers import NoteLeaveInput
from rooms.api import serializers as room_serializers
from rooms.api.serializers import EventsReadInput, MessageSendInput

CASES = [
    (MessageSendInput, {"body": "hello", "after_seq": 3}),
    (MessageSendInput, {"body": "", "after_seq": -1, "require_read": "maybe"}),
    (MessageSendInput, {"reply_to": 7}),
    (MessageSendInput, ["not", "an", "object"]),
    (NoteLeaveInput, {"to": "bob", "body": "x" * 10}),
    (NoteLeaveInput, {"body": None}),
    (EventsReadInput, {"limit": "500"}),
    (EventsReadInput, {}),
]


def _fresh(serializer_class, data):
    serializer = serializer_class(data=data)
    if serializer.is_valid():
        values = dict(serializer.validated_data)
        values.pop(validation.FINGERPRINT_FIELD, None)  # validated() reads it apart
        return ("valid", values)
    return ("invalid", serializer.errors)


def _shared(serializer_class, data):
    try:
        return ("valid", validated(serializer_class, data))
    except ValidationError as exc:
        return ("invalid", exc.detail)


@pytest.mark.parametrize(("serializer_class", "data"), CASES)
def test_the_result_is_the_fresh_serializers(serializer_class, data):
    assert _shared(serializer_class, data) == _fresh(serializer_class, data)


def test_threads_share_one_serializer_without_mixing_their_data():
    inputs = [{"body": f"message {i}", "after_seq": i} for i in range(400)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda data: validated(MessageSendInput, data), inputs))

    assert [(r["body"], r["after_seq"]) for r in results] == [
        (f"message {i}", i) for i in range(400)
    ]


@pytest.mark.parametrize(
    "text", ["", "plain", "é\ud800x", "a\udfff\ud800", "\U0001f600", "x" * 500 + "\udbff", 42]
)
def test_the_surrogate_check_answers_as_drfs(text):
    def outcome(validator):
        try:
            validator(text)
        except ValidationError as exc:
            return [(str(d), d.code) for d in exc.detail]
        return None

    assert outcome(FastProhibitSurrogateCharactersValidator()) == outcome(
        ProhibitSurrogateCharactersValidator()
    )


def test_a_body_with_a_surrogate_is_refused_as_drf_would():
    data = {"body": "hi \udc00"}
    assert _shared(MessageSendInput, data) == (
        "invalid",
        {"body": ["Surrogate characters are not allowed: U+DC00."]},
    )


def _input_classes():
    """Every serializer of the API's inputs: what ``validated`` is handed."""
    found = {}
    for module in (mailbox_serializers, room_serializers, validation):
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, serializers.Serializer)
                and not issubclass(value, serializers.ModelSerializer)
                and value.__module__ == module.__name__
            ):
                found[value.__qualname__] = value
    return [found[name] for name in sorted(found)]


INPUTS = _input_classes()
# For each field: left out (None here), or one of these values.
SAMPLES = [None, "", "x", "  ", 0, 3, -1, True, "true", 1.5, [], {}, ["a"], "a" * 70]
_MISSING = object()


@st.composite
def _bodies(draw, serializer_class):
    names = list(serializer_class().fields)
    body = {}
    for name in names:
        value = draw(st.sampled_from([_MISSING, *SAMPLES]))
        if value is not _MISSING:
            body[name] = value
    if draw(st.booleans()):
        body[draw(st.sampled_from(["requireRead", "extra"]))] = 1
    return body


def test_there_are_inputs_with_optional_fields_left_out_cheaply():
    assert {MessageSendInput, NoteLeaveInput, EventsReadInput} <= set(INPUTS)
    assert "after_seq" in validation._optional_fields(MessageSendInput)
    assert "require_read" not in validation._optional_fields(MessageSendInput)  # has a default


@pytest.mark.parametrize("serializer_class", INPUTS, ids=lambda c: c.__qualname__)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_body_validates_as_a_fresh_serializer_does(serializer_class, data):
    body = data.draw(_bodies(serializer_class))
    assert _shared(serializer_class, body) == _fresh(serializer_class, body)


class _FormInput(serializers.Serializer):
    """An HTML form reads a missing check box as False, not as left out."""

    flag = serializers.BooleanField(required=False)
    after_seq = serializers.IntegerField(required=False)


@pytest.mark.parametrize("serializer_class", [EventsReadInput, _FormInput])
@pytest.mark.parametrize("query", ["limit=5", "", "after_seq=&limit=2", "flag=on"])
def test_a_query_dict_is_validated_whole(serializer_class, query):
    data = QueryDict(query)
    assert _shared(serializer_class, data) == _fresh(serializer_class, data)
    assert _shared(_FormInput, QueryDict("")) == ("valid", {"flag": False})


def test_a_field_left_out_is_not_asked_for_its_value(monkeypatch):
    validation._instances.clear()
    validation._optional.clear()
    validated(MessageSendInput, {"body": "hi"})  # its fields looked at before the spy
    asked = []
    field_class = type(MessageSendInput().fields["after_seq"])
    original = field_class.run_validation

    def spy(self, *args):
        asked.append(self.field_name)
        return original(self, *args)

    monkeypatch.setattr(field_class, "run_validation", spy)
    validated(MessageSendInput, {"body": "hi"})
    validated(MessageSendInput, {"body": "hi", "after_seq": 4})

    assert asked == ["after_seq"]


class _MadeByDefault(serializers.CharField):
    def get_default(self):
        return "made"


class _MadeByValue(serializers.CharField):
    def get_value(self, dictionary):
        return dictionary.get(self.field_name, "made")


class _MadeWhenEmpty(serializers.CharField):
    def validate_empty_values(self, data):
        return (True, "made") if data is serializers.empty else super().validate_empty_values(data)


class _MadeByRun(serializers.CharField):
    def run_validation(self, data=serializers.empty):
        return "made" if data is serializers.empty else super().run_validation(data)


@pytest.mark.parametrize("field_class", [_MadeByDefault, _MadeByValue, _MadeWhenEmpty, _MadeByRun])
def test_a_field_that_answers_a_missing_value_itself_is_asked(field_class):
    serializer_class = type("Input", (serializers.Serializer,), {"x": field_class(required=False)})
    assert _shared(serializer_class, {}) == _fresh(serializer_class, {}) == ("valid", {"x": "made"})
