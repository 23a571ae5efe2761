"""Helpers of the search tests: what a query should find, worked out in plain Python."""

from __future__ import annotations

from common.search.query import Query, Term


def _term_at(found: list[str], term: Term, i: int) -> bool:
    last = len(term.words) - 1
    if i + last >= len(found):
        return False
    for j, word in enumerate(term.words):
        have = found[i + j]
        if not (have == word or (term.prefix and j == last and have.startswith(word))):
            return False
    return True


def term_matches(found: list[str], term: Term) -> bool:
    return any(_term_at(found, term, i) for i in range(len(found)))


def reference_matches(found: list[str], query: Query) -> bool:
    """Whether a text of words ``found`` matches ``query``, as SPEC §9 and
    common/search/query.py define it: every term included, none excluded."""
    return all(term_matches(found, t) for t in query.include) and not any(
        term_matches(found, t) for t in query.exclude
    )


# --- the two doors ------------------------------------------------------------------------

SEARCH = "/api/v1/search/"
RESULT_KEYS = {
    "message": {"kind", "id", "room", "seq", "from", "created_at", "snippet"},
    "note": {"kind", "id", "conversation_id", "from", "created_at", "snippet"},
}


def search_rest(session, **params) -> tuple[int, dict]:
    """``GET /api/v1/search/`` as ``session``: the status and the JSON body."""
    from tests.conftest import client_for

    params = {("from" if k == "author" else k): v for k, v in params.items()}
    response = client_for(session).get(SEARCH, params)
    return response.status_code, response.json()


def search_mcp(session, **arguments) -> tuple[int, dict]:
    """The MCP tool ``search`` as ``session``: the status REST would have answered
    (200, or the error's), and the JSON (``structuredContent``)."""
    from tests.doors import (
        mcp_result,  # imported here, as the REST helpers are: conftest loads last
    )

    arguments = {("from" if k == "author" else k): v for k, v in arguments.items()}
    result = mcp_result(session.raw_token, "search", arguments)
    content = result["structuredContent"]
    text = result["content"][0]["text"]
    # Snippets are peer text: the text content frames each one (SPEC §3.7).
    for hit in content.get("results", []):
        assert hit["snippet"] not in text.split("\n\n", 1)[0]
    if result["isError"]:
        return _ERROR_STATUS.get(content["error"]["code"], 400), content
    return 200, content


_ERROR_STATUS = {"not_a_member": 403, "room_not_found": 404}


def search(door: str, session, **params) -> tuple[int, dict]:
    return (search_rest if door == "rest" else search_mcp)(session, **params)
