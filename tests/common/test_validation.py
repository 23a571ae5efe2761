"""One shared serializer per input class validates exactly as a fresh one would."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from rest_framework.exceptions import ValidationError
from rest_framework.validators import ProhibitSurrogateCharactersValidator

from common.fields import FastProhibitSurrogateCharactersValidator
from common.validation import validated
from mailbox.api.serializers import NoteLeaveInput
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
        return ("valid", dict(serializer.validated_data))
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
