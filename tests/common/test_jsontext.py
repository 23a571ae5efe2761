"""common.jsontext reads JSON text into what json.loads gives, or fails as json.loads fails."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common import jsontext


def _outcome(load, text):
    """The value with every type spelled out (``repr``: 1 is not 1.0), or the error's type.

    The type itself: orjson's error is a subclass of json's, and must not leak.
    """
    try:
        value = load(text)
    except json.JSONDecodeError as error:
        return ("refused", type(error))
    return ("read", type(value), repr(value))


EDGES = [
    "{}",
    "[]",
    '{"unseen_before_send": 0, "unresolved_mentions": [], "mention_warnings": []}',
    '{"a": 1, "a": 2}',  # the last wins
    '{"b": 1, "a": 2}',  # in their order
    "-0",
    "-0.0",
    "1.0",
    "1E-400",  # underflows to 0.0 in both
    "1e400",  # orjson refuses; json reads inf
    "-1e400",
    "NaN",
    "Infinity",
    "-Infinity",
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",  # orjson reads a float
    "-9223372036854775809",
    "123456789012345678901234567890",
    "[1, 18446744073709551616]",
    '{"id": "12345678901234567890"}',  # a long run inside a string: json's, the same value
    '"\\ud800"',  # an escaped lone surrogate: json reads it, orjson refuses it
    '"\\ud83d\\ude00"',
    '"caf\\u00e9 \u2028"',
    " \t\n[1, 2]\r\n ",
    '"a\x00"',  # both refuse a raw control character
    "\ufeff[]",
    "",
    "not json",
    "[1, 2",
    "[1,]",
    "01",
    "True",
]


@pytest.mark.parametrize("text", EDGES, ids=repr)
def test_an_edge_reads_as_json_reads_it(text):
    assert _outcome(jsontext.loads, text) == _outcome(json.loads, text)


_numbers = st.one_of(
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
)
_values = st.recursive(
    st.none() | st.booleans() | _numbers | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(value=_values, ensure_ascii=st.booleans(), compact=st.booleans())
def test_any_text_json_writes_reads_as_json_reads_it(value, ensure_ascii, compact):
    text = json.dumps(value, ensure_ascii=ensure_ascii, separators=(",", ":") if compact else None)
    assert _outcome(jsontext.loads, text) == _outcome(json.loads, text)


@settings(max_examples=300, deadline=None)
@given(text=st.from_regex(r"\A-?(0|[1-9][0-9]{0,24})(\.[0-9]{1,20})?([eE][+-]?[0-9]{1,3})?\Z"))
def test_any_number_reads_as_json_reads_it(text):
    assert _outcome(jsontext.loads, text) == _outcome(json.loads, text)
