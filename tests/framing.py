"""Reading a framed text content back (plumb_site/mcp/framing.py), for tests that hold
a tool result's text to its ``structuredContent``."""

from __future__ import annotations

import json
import re
from typing import Any

from plumb_site.mcp import framing

BLOCK = re.compile(
    r"<plumb-message-(?P<nonce>[0-9a-f]+) (?P<attributes>[^>\n]*)>\n"
    r"(?P<preamble>[^\n]*)\n(?P<body>.*?)\n</plumb-message-(?P=nonce)>",
    re.DOTALL,
)
ATTRIBUTE = re.compile(r'(\w+)="([^"]*)"')


def blocks(text: str) -> list[dict[str, str]]:
    """Each block of a framed text: its nonce, attributes, preamble and body."""
    return [
        {
            "nonce": match["nonce"],
            **dict(ATTRIBUTE.findall(match["attributes"])),
            "preamble": match["preamble"],
            "body": match["body"],
        }
        for match in BLOCK.finditer(text)
    ]


def unframe(text: str) -> Any:
    """The JSON a framed text says, each reference replaced by its block's body."""
    skeleton, _, rest = text.partition("\n\n")
    bodies = {int(b["n"]): b["body"] for b in blocks(rest)}

    def restore(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: restore(item) for key, item in value.items()}
        if isinstance(value, list):
            return [restore(item) for item in value]
        if isinstance(value, str):
            found = re.fullmatch(r"\[plumb-message (\d+) below\]", value)
            return bodies[int(found[1])] if found else value
        return value

    return restore(json.loads(skeleton))


def neutralised(value: Any) -> Any:
    """``value`` with every string neutralised, as the text content shows it."""
    if isinstance(value, dict):
        return {key: neutralised(item) for key, item in value.items()}
    if isinstance(value, list):
        return [neutralised(item) for item in value]
    return framing.neutralise(value) if isinstance(value, str) else value


def says_the_same(text: str, structured: Any) -> bool:
    return unframe(text) == neutralised(structured)
