"""The API's renderer writes the bytes DRF's renderer writes, or lets DRF's write them."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import json
import uuid
from collections import OrderedDict

import pytest
from django.db import models
from rest_framework import renderers
from rest_framework.settings import api_settings

from common.renderers import JSONRenderer


class _Kind(models.TextChoices):
    AGENT = "agent", "Agent"


class _Level(models.IntegerChoices):
    ONE = 1, "One"


@dataclasses.dataclass
class _Point:
    x: int


# Every control character, the two that DRF escapes for JavaScript, and some that it does not.
_TEXT = "".join(map(chr, range(0x20))) + "\x7f\u2028\u2029é😀/\\\"<>&'"

SAME = [
    {"body": _TEXT, "n": [1, -2, 2.5, 0.1, 3.0, -0.0, None, True, False]},
    {
        "aware": datetime.datetime(2026, 12, 3, 10, 0, 0, 123456, tzinfo=datetime.UTC),
        "other_zone": datetime.datetime(
            2026, 12, 3, 10, 0, 0, tzinfo=datetime.timezone(datetime.timedelta(hours=2))
        ),
        "naive": datetime.datetime(2026, 1, 1),  # noqa: DTZ001 - one without a zone too
        "day": datetime.date(2026, 1, 2),
        "time": datetime.time(1, 2, 3, 450000),
        "span": datetime.timedelta(seconds=3.5),
    },
    {"id": uuid.UUID("dede1db2-b2cd-4501-b13e-1b8ee7cc35a4"), "amount": decimal.Decimal("1.10")},
    OrderedDict(second=2, first=1),
    ("a", ("nested", [])),
    [_Kind.AGENT, _Level.ONE],
    {"big": 2**70, "small": -(2**63)},  # past 64 bits: DRF's renderer writes it
    {1: "an integer key", None: "none"},  # keys that are not strings: DRF's too
    {"empty": {}, "list": [], "text": ""},
]


@pytest.mark.parametrize("data", SAME, ids=range(len(SAME)))
def test_the_bytes_are_drfs(data):
    assert JSONRenderer().render(data) == renderers.JSONRenderer().render(data)


def test_nothing_renders_as_nothing():
    assert JSONRenderer().render(None) == b""


def test_a_float_is_the_same_number_however_its_exponent_is_spelled():
    data = {"f": [1e16, 1e-7, 1.5e300]}

    assert json.loads(JSONRenderer().render(data)) == data


@pytest.mark.parametrize("data", [{"point": _Point(1)}, {"thing": object()}])
def test_what_drf_refuses_is_refused_alike(data):
    with pytest.raises(TypeError) as drfs:
        renderers.JSONRenderer().render(data)
    with pytest.raises(TypeError) as ours:
        JSONRenderer().render(data)

    assert str(ours.value) == str(drfs.value)


def test_indented_output_is_drfs():
    data = {"a": [1, {"b": "c"}]}
    accepted = "application/json; indent=2"

    assert JSONRenderer().render(data, accepted) == renderers.JSONRenderer().render(data, accepted)
    assert JSONRenderer().render(data, accepted).startswith(b"{\n  ")


def test_settings_that_change_drfs_output_are_drfs(monkeypatch):
    data = {"body": "é\u2028"}
    monkeypatch.setattr(JSONRenderer, "ensure_ascii", True)  # UNICODE_JSON = False
    monkeypatch.setattr(renderers.JSONRenderer, "ensure_ascii", True)

    assert (
        JSONRenderer().render(data)
        == renderers.JSONRenderer().render(data)
        == (b'{"body":"\\u00e9\\u2028"}')
    )


def test_the_api_answers_with_it():
    assert [JSONRenderer] == api_settings.DEFAULT_RENDERER_CLASSES
