"""JSON text read as the standard library reads it, by orjson wherever the two agree.

Every event of a room read carries two or three JSON columns (a message's
mentions and send report, an event's data), and ``json.loads`` spends about
a microsecond on each even when it holds ``{}``; orjson reads them in a
twentieth of that. The two disagree on a few inputs, and those go to
``json``:

* an integer past 64 bits, which orjson reads as a float: any run of 19 or
  more digits sends the text to ``json``;
* what orjson refuses and ``json`` reads (NaN, Infinity, an exponent too large
  for a float, an escaped lone surrogate), and what both refuse, whose error
  is then ``json``'s.

Otherwise the values are equal and of the same types, the last of a repeated
key wins in both, and keys keep their order (``tests/common/test_jsontext.py``).
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

_LONG_NUMBER = re.compile(r"\d{19}")


def loads(text: str) -> Any:
    """``json.loads(text)``: the same value, or the same ``json.JSONDecodeError``."""
    if _LONG_NUMBER.search(text) is None:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)
