"""A response's headers answer ``in`` and ``get`` as ``collections.abc.Mapping`` would,
without raising and catching a ``KeyError`` for a missing one (``plumb_site/headers.py``)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from django.http import HttpResponse
from django.http.response import ResponseHeaders
from django.test import RequestFactory
from hypothesis import given
from hypothesis import strategies as st

from plumb_site import headers

_STORED = st.text(alphabet="abcXYZ-_", min_size=1, max_size=6)  # a header's name is ASCII
_ASKED = st.text(alphabet="abcXYZ-_éİK", min_size=1, max_size=6)  # anything may be asked
_MISSING = object()


def test_djangos_response_headers_use_them():
    assert ResponseHeaders.__contains__ is headers._contains
    assert ResponseHeaders.get is headers._get


@given(
    stored=st.dictionaries(_STORED, st.text(alphabet="ab 1", max_size=3), max_size=5), key=_ASKED
)
def test_in_and_get_answer_as_mappings_do(stored, key):
    held = ResponseHeaders(stored)
    for asked in (key, key.upper(), key.lower(), *stored, *(name.upper() for name in stored)):
        assert (asked in held) is Mapping.__contains__(held, asked)
        assert held.get(asked) == Mapping.get(held, asked)
        assert held.get(asked, _MISSING) is Mapping.get(held, asked, _MISSING) or (
            held.get(asked, _MISSING) == Mapping.get(held, asked, _MISSING) != _MISSING
        )


@pytest.mark.parametrize("key", [1, None])
def test_a_key_that_is_not_text_fails_as_it_does_in_a_mapping(key):
    held = ResponseHeaders({"Content-Type": "text/plain"})
    for ask in (lambda: key in held, lambda: held.get(key)):
        with pytest.raises(AttributeError):
            ask()
    for ask in (lambda: Mapping.__contains__(held, key), lambda: Mapping.get(held, key)):
        with pytest.raises(AttributeError):
            ask()


def test_a_name_in_bytes_is_not_held_either_way():
    held = ResponseHeaders({"Content-Type": "text/plain"})

    assert (b"content-type" in held) is Mapping.__contains__(held, b"content-type") is False
    assert held.get(b"content-type", 0) == Mapping.get(held, b"content-type", 0) == 0


def test_a_response_reads_and_sets_its_headers_by_any_case():
    response = HttpResponse(b"{}", content_type="application/json")

    assert response.has_header("content-type")
    assert not response.has_header("X-Frame-Options")
    assert response.get("X-Frame-Options", "none") == "none"
    response.headers.setdefault("X-Frame-Options", "DENY")
    response.headers.setdefault("x-frame-options", "SAMEORIGIN")  # already there: kept
    assert response["X-FRAME-OPTIONS"] == "DENY"
    assert response.get("x-frame-options") == "DENY"


def test_a_requests_headers_keep_their_own_look_up():
    """``HttpHeaders`` (a request's) reads ``user_agent`` as ``User-Agent``: left as it is."""
    request = RequestFactory().get("/", HTTP_USER_AGENT="probe")

    assert "user_agent" in request.headers
    assert request.headers.get("user_agent") == "probe"


def test_a_django_that_looks_headers_up_otherwise_keeps_its_own(monkeypatch):
    monkeypatch.delattr(ResponseHeaders, "__contains__")
    monkeypatch.delattr(ResponseHeaders, "get")
    monkeypatch.setattr(ResponseHeaders, "__getitem__", lambda self, key: self._store[key][1])

    headers.install()

    assert "__contains__" not in vars(ResponseHeaders)
    assert "get" not in vars(ResponseHeaders)
