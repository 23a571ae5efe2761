"""A response's headers asked for one they do not hold, without an exception.

Django's ``ResponseHeaders`` answers ``in`` and ``get`` through
``collections.abc.Mapping``, which looks the header up and catches the
``KeyError`` of one that is missing. Every answer asks after headers it does
not have: the content type as it is made, then the middleware's
``X-Frame-Options``, ``Content-Length``, ``Referrer-Policy`` and the rest
(``setdefault``, ``has_header``), seven a call at about 0.8 µs each, 0.15 µs
here. The two look in the mapping's store, as its ``__getitem__`` does
(``_store``, keyed by the lower-cased name); a later Django whose
``ResponseHeaders`` looks headers up in any other way keeps its own answers
(``install``), and ``tests/plumb_site/test_headers.py`` holds both to
``Mapping``'s for any key.
"""

from __future__ import annotations

from typing import Any

from django.http.response import ResponseHeaders
from django.utils.datastructures import CaseInsensitiveMapping


def _contains(self: ResponseHeaders, key: Any) -> bool:
    return key.lower() in self._store


def _get(self: ResponseHeaders, key: Any, default: Any = None) -> Any:
    found = self._store.get(key.lower())
    return default if found is None else found[1]


def install() -> None:
    """Give Django's ``ResponseHeaders`` these two, where it looks a header up as they do."""
    if (
        ResponseHeaders.__getitem__ is CaseInsensitiveMapping.__getitem__
        and "__contains__" not in vars(CaseInsensitiveMapping)
        and "get" not in vars(CaseInsensitiveMapping)
        and "__contains__" not in vars(ResponseHeaders)
        and "get" not in vars(ResponseHeaders)
    ):
        ResponseHeaders.__contains__ = _contains
        ResponseHeaders.get = _get
