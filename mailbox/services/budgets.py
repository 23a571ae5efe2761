"""Daily budgets of notes and of room messages (SPEC §8): exact under any race.

A project with a budget has a counter row per UTC day and kind of write
(``DailyUsage``). Each write it counts runs one statement in its own
transaction, before its insert:

    INSERT ... VALUES (project, day, what, 1)
    ON CONFLICT (project, day, what) DO UPDATE SET used = used + 1 WHERE used < budget
    RETURNING used

No row back means the budget is spent: the write raises ``budget_exhausted``
and its transaction rolls back whole (nothing stored, its idempotency key
unused, the count not taken). The conditional upsert is the fix for the
race: on PostgreSQL a second writer's upsert waits for the first's row lock
(or, on the day's first write, for its uncommitted insert) and then
evaluates ``used < budget`` against the committed count, so N writers racing
at the edge let exactly the budget through; on SQLite the IMMEDIATE
transaction runs writers one at a time. A read-then-write would let them all
through on the same stale count (``tests/mailbox/test_budget_races.py``).

A project without a budget (0) runs no statement at all: the hot paths of
``note_leave`` and ``message_send`` cost what they did.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

from django.db import connection

from common import metrics
from common.pause import pause_point
from mailbox.errors import BudgetExhausted
from mailbox.models import AuthorKind, DailyUsage, Project
from mailbox.representation import timestamp


def budget_day(now: datetime) -> date:
    """The UTC day a write at ``now`` counts on."""
    return now.astimezone(UTC).date()


def budget_resets_at(now: datetime) -> datetime:
    """The next midnight UTC after ``now``: when every daily budget is whole again."""
    return datetime.combine(budget_day(now) + timedelta(days=1), time(0), tzinfo=UTC)


def _upsert_sql() -> str:
    quote = connection.ops.quote_name
    table = quote(DailyUsage._meta.db_table)
    return (
        f"INSERT INTO {table} ({quote('project_id')}, {quote('day')}, {quote('what')}, "
        f"{quote('used')}) VALUES (%s, %s, %s, 1) "
        f"ON CONFLICT ({quote('project_id')}, {quote('day')}, {quote('what')}) "
        f"DO UPDATE SET {quote('used')} = {table}.{quote('used')} + 1 "
        f"WHERE {table}.{quote('used')} < %s RETURNING {quote('used')}"
    )


def budget_spend(
    project: Project, what: str, *, budget: int, author_kind: str, now: datetime, cursor=None
) -> int | None:
    """Count one write by ``project``'s agents against its daily budget of ``what``.

    Call it inside the write's transaction, after the write's own checks.
    Returns the day's count with this write, or None when nothing is counted
    (no budget, or not an agent's write: people and plumb itself are never
    budgeted). Raises ``budget_exhausted``. Locks the day's counter row until
    the transaction ends.
    """
    if not budget or author_kind != AuthorKind.AGENT:
        return None
    day = budget_day(now)
    params = [project.pk, connection.ops.adapt_datefield_value(day), what, budget]
    if cursor is None:
        with connection.cursor() as own:
            own.execute(_upsert_sql(), params)
            row = own.fetchone()
    else:
        cursor.execute(_upsert_sql(), params)
        row = cursor.fetchone()
    pause_point("budget.counted")
    if row is None:
        metrics.CAP_REFUSALS.labels(cap=f"daily_{what[:-1]}_budget").inc()
        used = (
            DailyUsage.objects.filter(project=project, day=day, what=what)
            .values_list("used", flat=True)
            .first()
        )
        raise BudgetExhausted(
            budget=budget, used=used or budget, resets_at=timestamp(budget_resets_at(now))
        )
    return row[0]


def usage_forget(*, before: date) -> int:
    """Drop counters of days before ``before``: only today's is ever read."""
    deleted, _ = DailyUsage.objects.filter(day__lt=before).delete()
    return deleted
