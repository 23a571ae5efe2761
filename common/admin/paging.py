"""Changelists of tables that only grow (events, messages, notes, audit records).

Django's changelist counts the filtered rows to draw its paginator, and counts
the whole table again for "N total". Both are a full scan on PostgreSQL, whose
counts are never free, and both grow with the table. These changelists skip
the second count and bound the first: the paginator counts at most a few pages
past the one shown (``SELECT COUNT(*) FROM (... LIMIT n)``) and says "more
than n" when there are more. Paging further moves the bound along.
"""

from __future__ import annotations

from django.contrib import admin
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.functional import cached_property

# Pages counted past the one shown.
PAGES_AHEAD = 10


class BoundedCountPaginator(Paginator):
    """A paginator that counts no further than ``bound`` rows.

    ``count`` is exact up to the bound; past it, it is ``bound + 1`` (so a
    "next" page exists) and ``capped`` is true.
    """

    def __init__(self, object_list: QuerySet, per_page: int, *, bound: int, **kwargs) -> None:
        super().__init__(object_list, per_page, **kwargs)
        self.bound = bound
        self.capped = False

    @cached_property
    def count(self) -> int:
        # Slicing before count() makes Django count a LIMITed subquery.
        counted = self.object_list[: self.bound + 1].count()
        self.capped = counted > self.bound
        return counted

    @property
    def count_text(self) -> str:
        return f"more than {self.bound:,}" if self.capped else f"{self.count:,}"


class LargeTableAdminMixin:
    """No full-table counts: the changelist shows "more than N" instead of a total,
    and filters offer no facet counts (one more count per filter choice)."""

    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 100

    def get_paginator(
        self,
        request: HttpRequest,
        queryset: QuerySet,
        per_page: int,
        orphans: int = 0,
        allow_empty_first_page: bool = True,
    ) -> BoundedCountPaginator:
        try:
            page = max(int(request.GET.get("p", 1)), 1)
        except ValueError:
            page = 1
        return BoundedCountPaginator(
            queryset,
            per_page,
            bound=(page + PAGES_AHEAD) * per_page,
            orphans=orphans,
            allow_empty_first_page=allow_empty_first_page,
        )
