"""Changelist search through the full-text index (SPEC §9), with the matches shown.

A changelist of texts (messages, notes) finds rows by their exact id or a
name, as Django's ``search_fields`` say, **or** by the words of their body in
plumb's search language, through the same index the agents' search uses
(never a scan of every body). While a search is on, a "match" column shows
the snippet of each body with its matches marked. A malformed query still
finds by id and name, and says what is wrong with it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.views.main import SEARCH_VAR
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import SafeString, mark_safe

from common.search.query import InvalidQuery, Query, parse
from common.search.snippets import segments


def snippet_html(body: str, query: Query) -> SafeString:
    """The snippet of ``body`` for ``query`` with each match in ``<mark>``, escaped."""
    return mark_safe(
        "".join(
            format_html("<mark>{}</mark>", text) if is_match else conditional_escape(text)
            for text, is_match in segments(body, query)
        )
    )


class FullTextSearchMixin:
    """``search_fields`` for ids and names, the index for words of ``search_body``.

    ``search_matching(queryset, query)`` narrows a queryset to the rows whose
    body matches (a selector of the model's app); ``search_replaces`` names
    the list column the "match" column takes the place of while searching.
    """

    search_matching: Callable[[QuerySet, Query], QuerySet]
    search_body = "body"
    search_replaces = ""

    def _search_query(self, request: HttpRequest) -> Query | None:
        term = request.GET.get(SEARCH_VAR, "").strip()
        if not term:
            return None
        try:
            return parse(term)
        except InvalidQuery:
            return None

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        by_fields, may_have_duplicates = super().get_search_results(  # type: ignore[misc]
            request, queryset, search_term
        )
        if not search_term.strip():
            return by_fields, may_have_duplicates
        try:
            query = parse(search_term.strip())
        except InvalidQuery as exc:
            messages.warning(request, f"Words of the text were not searched: {exc.message}")
            return by_fields, may_have_duplicates
        matching = type(self).search_matching
        return by_fields | matching(queryset, query), may_have_duplicates

    def get_list_display(self, request: HttpRequest) -> Any:
        display = list(super().get_list_display(request))  # type: ignore[misc]
        query = self._search_query(request)
        if query is None:
            return display
        field = self.search_body

        @admin.display(description="match")
        def match(obj: Model) -> SafeString:
            return snippet_html(getattr(obj, field), query)

        if self.search_replaces in display:
            display[display.index(self.search_replaces)] = match
        else:
            display.append(match)
        return display
