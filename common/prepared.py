"""Queries that nearly every request runs, compiled to SQL once per process.

Turning a queryset into SQL costs a few hundred microseconds of Python each
time (the ORM resolves every lookup, join and column again), which is more
than SQLite or PostgreSQL need to answer these small indexed queries. A
``Prepared`` query is built by the ORM once, on first use, with a sentinel
value for each parameter; afterwards only its parameters change. Rows pass
through the same converters the ORM applies, so values come back as the ORM
would return them.

Only for hot paths that the benchmark shows (``make bench``); everything else
uses the ORM directly.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from types import NoneType
from typing import Any

from django.db import connections
from django.db.backends.base.operations import BaseDatabaseOperations
from django.db.models import (
    AutoField,
    BigAutoField,
    BigIntegerField,
    CharField,
    Field,
    ForeignKey,
    IntegerField,
    Model,
    QuerySet,
    SmallAutoField,
    SmallIntegerField,
    TextField,
)

# Far outside any id, count or seq that plumb stores, so that a sentinel is
# never confused with a constant of the query itself.
_SENTINEL_BASE = -7_300_000_001


class Prepared:
    """A ``values_list()`` queryset compiled once and then run with fresh parameters.

    ``build`` receives one keyword per name in ``params`` and returns the
    queryset. It is called once with a distinct integer sentinel per
    parameter; wherever a sentinel (or its text, for a text column) appears
    among the compiled SQL's parameters, ``rows()`` puts the value given for
    that name. Compiling fails loudly if a parameter vanished on the way (an
    ORM that folded it into the SQL text), rather than run the wrong query.
    """

    def __init__(self, build: Callable[..., QuerySet], params: Sequence[str]) -> None:
        self._build = build
        self._names = list(params)
        self._compiled: dict[str, tuple[str, list[tuple[bool, Any]], list]] = {}
        self._lock = threading.Lock()

    def _compile(self, using: str) -> tuple[str, list[tuple[bool, Any]], list]:
        sentinels = {name: _SENTINEL_BASE - i for i, name in enumerate(self._names)}
        slot_of: dict[Any, str] = {}
        for name, value in sentinels.items():
            slot_of[value] = name
            slot_of[str(value)] = name
        compiler = self._build(**sentinels).query.get_compiler(using=using)
        sql, compiled_params = compiler.as_sql()
        slots = [
            (True, slot_of[p]) if _hashable(p) and p in slot_of else (False, p)
            for p in compiled_params
        ]
        missing = set(self._names) - {name for is_slot, name in slots if is_slot}
        if missing:
            raise ValueError(f"parameters not found in the compiled query: {sorted(missing)}")
        converters = list(compiler.get_converters([col for col, _, _ in compiler.select]).items())
        return sql, slots, converters

    def rows(self, using: str = "default", cursor=None, **values: Any) -> list[list[Any]]:
        """The rows for ``values``; on ``cursor`` if given (one of ``using``), else a new one."""
        compiled = self._compiled.get(using)
        if compiled is None:
            with self._lock:
                compiled = self._compiled.get(using) or self._compile(using)
                self._compiled[using] = compiled
        sql, slots, converters = compiled
        params = [values[value] if is_slot else value for is_slot, value in slots]
        connection = connections[using]
        if cursor is None:
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
                fetched = cursor.fetchall()
        else:
            cursor.execute(sql, params)
            fetched = cursor.fetchall()
        rows = []
        for raw in fetched:
            row = list(raw)
            for position, (functions, expression) in converters:
                value = row[position]
                for convert in functions:
                    value = convert(value, expression, connection)
                row[position] = value
            rows.append(row)
        return rows


class PreparedObjects(Prepared):
    """A ``Prepared`` query whose rows come back as instances, wired as ``select_related`` would.

    ``build`` returns a queryset of one model, filtered and annotated.
    ``related`` names the relations to load in the same query: forward paths
    (``"name"``, ``"workspace__project"``; their steps are loaded too), and a
    reverse path to one row when the filter leaves one (``"project__keys"``),
    whose instance then points back at its parent. ``annotations`` are set
    on the base instance as the ORM sets them. Each row becomes a dict of
    instances by path, the base one under ``""``: one place wires related
    rows, so a query adds a relation by naming it.
    """

    def __init__(
        self,
        build: Callable[..., QuerySet],
        params: Sequence[str],
        *,
        related: Sequence[str] = (),
        annotations: Sequence[str] = (),
    ) -> None:
        self._build_objects = build
        self._related = related
        self._annotations = tuple(annotations)
        self._plan: _LoadPlan | None = None
        super().__init__(self._build_values, params)

    def _build_values(self, **values: Any) -> QuerySet:
        queryset = self._build_objects(**values)
        if self._plan is None:
            self._plan = _LoadPlan(queryset.model, self._related)
        if not queryset.query.order_by:
            queryset = queryset.order_by()  # no model's default ordering unless asked for
        return queryset.values_list(*self._plan.columns, *self._annotations)

    def first(self, using: str = "default", cursor=None, **values: Any) -> dict[str, Any] | None:
        """The first row's instances by path, or None when nothing matches."""
        rows = self.rows(using, cursor, **values)
        return self._load(rows[0], using) if rows else None

    def all(self, using: str = "default", cursor=None, **values: Any) -> list[dict[str, Any]]:
        return [self._load(row, using) for row in self.rows(using, cursor, **values)]

    def _load(self, row: Sequence[Any], using: str) -> dict[str, Any]:
        objects = self._plan.load(row, using)
        base = objects[""]
        for name, value in zip(self._annotations, row[len(self._plan.columns) :], strict=True):
            setattr(base, name, value)
        return objects


class _LoadPlan:
    """Columns of a model and of its related rows, and how to wire the instances."""

    def __init__(self, model: type[Model], related: Sequence[str]) -> None:
        names = concrete_attnames(model)
        self.columns: list[str] = list(names)
        self._base = (model, names, len(names))
        # (path, model, its column names, first column, parent path, attribute
        # of the parent that holds it, or the attribute of it that holds the parent)
        self._steps: list[tuple[str, type[Model], tuple[str, ...], int, str, str, str]] = []
        models = {"": model}
        for full in related:
            parts = full.split("__")
            for depth in range(1, len(parts) + 1):
                path = "__".join(parts[:depth])
                if path in models:
                    continue
                parent = "__".join(parts[: depth - 1])
                relation = models[parent]._meta.get_field(parts[depth - 1])
                target = relation.related_model
                target_names = concrete_attnames(target)
                if relation.one_to_many:
                    # A reverse foreign key's row points back at its parent.
                    down, up = "", relation.field.name
                else:
                    down, up = parts[depth - 1], ""
                self._steps.append(
                    (path, target, target_names, len(self.columns), parent, down, up)
                )
                models[path] = target
                self.columns.extend(f"{path}__{name}" for name in target_names)

    def load(self, row: Sequence[Any], using: str) -> dict[str, Any]:
        model, names, end = self._base
        objects: dict[str, Any] = {"": model.from_db(using, names, row[:end])}
        for path, model, names, start, parent_path, down, up in self._steps:
            instance = model.from_db(using, names, row[start : start + len(names)])
            if instance.pk is None:
                instance = None  # an outer join found no row: a null foreign key
            parent = objects[parent_path]
            if parent is not None and down:
                setattr(parent, down, instance)
            elif parent is not None and instance is not None:
                setattr(instance, up, parent)
            objects[path] = instance
        return objects


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


@functools.cache
def concrete_attnames(model: type[Model]) -> tuple[str, ...]:
    """The model's column attributes in ``from_db`` order; fixed once apps are loaded."""
    return tuple(f.attname for f in model._meta.concrete_fields)


def instances_from_row(row: Sequence[Any], *models: type[Model], using: str = "default"):
    """Split a row of ``concrete_attnames`` of each model in turn into instances."""
    start = 0
    instances = []
    for model in models:
        names = concrete_attnames(model)
        instances.append(model.from_db(using, names, row[start : start + len(names)]))
        start += len(names)
    return instances


def _as_is_types(field: Field, connection) -> tuple[type, ...]:
    """The value types that ``field`` saves unchanged on this connection.

    For these, ``pre_save`` and ``get_db_prep_save`` return the attribute as
    it is (a str for a text column; an int or None for an integer column or a
    key, where the backend adapts integers as they are, as SQLite does), so
    the insert can pass it straight on. Exact Django classes only: a subclass
    may convert. Any other value takes the full path.
    """
    kind = type(field)
    ops = type(connection.ops)
    if kind.pre_save is not Field.pre_save:
        return ()
    if kind in (CharField, TextField):
        return (str, NoneType)
    integers_as_is = (
        kind in (IntegerField, BigIntegerField, SmallIntegerField)
        and ops.adapt_integerfield_value is BaseDatabaseOperations.adapt_integerfield_value
    )
    keys_as_is = (
        kind is ForeignKey
        and type(field.target_field) in (AutoField, BigAutoField, SmallAutoField)
        and ops.validate_autopk_value is BaseDatabaseOperations.validate_autopk_value
    )
    return (int, NoneType) if integers_as_is or keys_as_is else ()


def _row_params(instance: Model, plan, connection) -> list[Any]:
    """An instance's values as ``Model.save()`` would write them (see ``_as_is_types``)."""
    params = []
    for f, attname, as_is in plan:
        value = getattr(instance, attname)
        if type(value) not in as_is:
            value = f.get_db_prep_save(f.pre_save(instance, True), connection)
        params.append(value)
    return params


class PreparedInsert:
    """Saves a new instance and takes its new key, the SQL built once per process.

    Every concrete field but the automatic key is written, its value taken
    through ``pre_save`` and ``get_db_prep_save`` as ``Model.save()`` does.
    No signals are sent: only for models that have no receivers.

    A transaction that runs several of these statements may pass one cursor
    (of ``using``) to them all: opening and closing one costs more than
    SQLite needs for a small insert.
    """

    def __init__(self, model: type[Model]) -> None:
        self._model = model
        self._fields = [f for f in model._meta.concrete_fields if not f.primary_key]
        self._compiled: dict[str, tuple[str, list[tuple[Field, str, tuple[type, ...]]]]] = {}
        self._compiled_many: dict[tuple[str, int], str] = {}

    def prepare(self, using: str = "default") -> None:
        """Build the single-row statement and its plan for ``using``, once."""
        if using in self._compiled:
            return
        connection = connections[using]
        quote = connection.ops.quote_name
        meta = self._model._meta
        columns = ", ".join(quote(f.column) for f in self._fields)
        marks = ", ".join(["%s"] * len(self._fields))
        sql = f"INSERT INTO {quote(meta.db_table)} ({columns}) VALUES ({marks})"
        if connection.vendor != "sqlite":
            sql += f" RETURNING {quote(meta.pk.column)}"
        plan = [(f, f.attname, _as_is_types(f, connection)) for f in self._fields]
        self._compiled[using] = (sql, plan)

    def insert(self, instance: Model, using: str = "default", cursor=None) -> None:
        connection = connections[using]
        compiled = self._compiled.get(using)
        if compiled is None:
            self.prepare(using)
            compiled = self._compiled[using]
        sql, plan = compiled
        params = _row_params(instance, plan, connection)
        if cursor is None:
            with connection.cursor() as cursor:
                instance.pk = self._execute(cursor, sql, params, connection)
        else:
            instance.pk = self._execute(cursor, sql, params, connection)
        instance._state.adding = False
        instance._state.db = using

    def insert_many(self, instances: Sequence[Model], using: str = "default", cursor=None) -> None:
        """Several new rows in one statement; their new keys are not read back.

        For rows nobody reads again in the transaction (a new thread's
        participants): one statement instead of one per row.
        """
        connection = connections[using]
        self.prepare(using)
        _, plan = self._compiled[using]
        rows = self._compiled_many.get((using, len(instances)))
        if rows is None:
            quote = connection.ops.quote_name
            columns = ", ".join(quote(f.column) for f in self._fields)
            marks = "(" + ", ".join(["%s"] * len(self._fields)) + ")"
            rows = self._compiled_many[(using, len(instances))] = (
                f"INSERT INTO {quote(self._model._meta.db_table)} ({columns}) "
                f"VALUES {', '.join([marks] * len(instances))}"
            )
        params = [value for i in instances for value in _row_params(i, plan, connection)]
        if cursor is None:
            with connection.cursor() as cursor:
                cursor.execute(rows, params)
        else:
            cursor.execute(rows, params)

    @staticmethod
    def _execute(cursor, sql: str, params: list, connection) -> Any:
        cursor.execute(sql, params)
        # SQLite reports the new rowid without a returned row to step through
        # (one call into SQLite fewer, inside the write lock).
        return cursor.lastrowid if connection.vendor == "sqlite" else cursor.fetchone()[0]


class PreparedUpdate:
    """``UPDATE table SET ... WHERE pk = %s [AND extra]``, the SQL built once per process.

    ``where`` is an optional condition on the row, written with column names
    and ``%s`` (for example ``"read_seq" < %s``), for conditional updates.
    ``update_in`` updates the rows of several keys at once (``pk IN (...)``).
    ``cursor`` is as for ``PreparedInsert``.
    """

    def __init__(self, model: type[Model], fields: Sequence[str], where: str = "") -> None:
        self._model = model
        self._fields = [model._meta.get_field(name) for name in fields]
        self._where = where
        self._compiled: dict[str, tuple[str, str, list[tuple[Field, str, tuple[type, ...]]]]] = {}

    def update(
        self, pk: Any, *where_params: Any, using: str = "default", cursor=None, **values: Any
    ) -> int:
        return self._run([pk], where_params, using, cursor, values)

    def update_in(
        self,
        pks: Sequence[Any],
        *where_params: Any,
        using: str = "default",
        cursor=None,
        **values: Any,
    ) -> int:
        if not pks:
            return 0
        return self._run(pks, where_params, using, cursor, values)

    def _run(self, pks, where_params, using: str, cursor, values: dict[str, Any]) -> int:
        connection = connections[using]
        compiled = self._compiled.get(using)
        if compiled is None:
            quote = connection.ops.quote_name
            meta = self._model._meta
            assignments = ", ".join(f"{quote(f.column)} = %s" for f in self._fields)
            head = f"UPDATE {quote(meta.db_table)} SET {assignments} WHERE {quote(meta.pk.column)}"
            tail = f" AND {self._where}" if self._where else ""
            plan = [(f, f.attname, _as_is_types(f, connection)) for f in self._fields]
            compiled = self._compiled[using] = (head, tail, plan)
        head, tail, plan = compiled
        keys = " = %s" if len(pks) == 1 else f" IN ({', '.join(['%s'] * len(pks))})"
        sql = head + keys + tail
        params = []
        for f, attname, as_is in plan:
            value = values[attname]
            if type(value) not in as_is:
                value = f.get_db_prep_save(value, connection)
            params.append(value)
        params += [*pks, *where_params]
        if cursor is None:
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
                return cursor.rowcount
        cursor.execute(sql, params)
        return cursor.rowcount
