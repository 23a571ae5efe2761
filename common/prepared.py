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
import json
import keyword
import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from types import NoneType
from typing import Any

from django.db import connections, router
from django.db.backends.base.operations import BaseDatabaseOperations
from django.db.models import (
    NOT_PROVIDED,
    AutoField,
    BigAutoField,
    BigIntegerField,
    CharField,
    DateTimeField,
    Field,
    ForeignKey,
    IntegerField,
    JSONField,
    Model,
    QuerySet,
    SmallAutoField,
    SmallIntegerField,
    TextField,
)
from django.db.models.base import DEFERRED, ModelState
from django.db.models.fields.related_descriptors import ForeignKeyDeferredAttribute
from django.db.models.query_utils import DeferredAttribute
from django.db.models.signals import post_init, pre_init

from common import jsontext

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
        # One step per converter, a column's in the ORM's order: each takes
        # what the one before it gave.
        steps = [
            (position, _faster(convert), expression)
            for position, (functions, expression) in compiler.get_converters(
                [col for col, _, _ in compiler.select]
            ).items()
            for convert in functions
        ]
        return sql, slots, steps

    def rows(self, using: str = "default", cursor=None, **values: Any) -> list[list[Any]]:
        """The rows for ``values``; on ``cursor`` if given (one of ``using``), else a new one."""
        compiled = self._compiled.get(using)
        if compiled is None:
            with self._lock:
                compiled = self._compiled.get(using) or self._compile(using)
                self._compiled[using] = compiled
        sql, slots, steps = compiled
        params = [values[value] if is_slot else value for is_slot, value in slots]
        connection = _connection_of(using, cursor)
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
            for position, convert, expression in steps:
                row[position] = convert(row[position], expression, connection)
            rows.append(row)
        return rows


def _faster(convert: Callable) -> Callable:
    """``convert``, or a converter that gives the same values faster.

    A JSON column's (``JSONField.from_db_value`` without a decoder of its
    own): the text is read by ``common.jsontext``, ``json.loads``'s values by
    orjson, and anything else takes Django's converter.
    """
    field = getattr(convert, "__self__", None)
    if not (
        type(field) is JSONField
        and field.decoder is None
        and getattr(convert, "__func__", None) is JSONField.from_db_value
    ):
        return convert

    def from_db_value(value: Any, expression: Any, connection: Any) -> Any:
        if type(value) is not str:
            return convert(value, expression, connection)
        try:
            return jsontext.loads(value)
        except json.JSONDecodeError:
            return value  # as Django's: text that is not JSON is kept as it is

    return from_db_value


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
        # (path, model, its column names, first column, parent path, how it is
        # linked to its parent)
        self._steps: list[tuple[str, type[Model], tuple[str, ...], int, str, _Link]] = []
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
                self._steps.append(
                    (path, target, target_names, len(self.columns), parent, _linker(relation))
                )
                models[path] = target
                self.columns.extend(f"{path}__{name}" for name in target_names)

    def load(self, row: Sequence[Any], using: str) -> dict[str, Any]:
        model, names, end = self._base
        objects: dict[str, Any] = {"": from_db(model, using, names, row[:end])}
        for path, model, names, start, parent_path, link in self._steps:
            instance = from_db(model, using, names, row[start : start + len(names)])
            if instance.pk is None:
                instance = None  # an outer join found no row: a null foreign key
            parent = objects[parent_path]
            if parent is not None:
                link(parent, instance)
            objects[path] = instance
        return objects


_Link = Callable[[Model, Model | None], None]


def _linker(relation: Any) -> _Link:
    """How a related row is attached to its parent, as ``select_related`` attaches it.

    Into the relations' caches (``set_cached_value``), both ways for a
    one-to-one, as Django's own ``select_related`` does, rather than by
    assigning the attribute: that re-checks the class and asks the database
    routers, about a microsecond and a half each time, for a pair the row
    itself joined.
    """
    if relation.one_to_many:  # a reverse foreign key: its row points back at its parent
        back = relation.field

        def up(parent: Model, instance: Model | None) -> None:
            if instance is not None:
                back.set_cached_value(instance, parent)

        return up
    if not (relation.many_to_one or relation.one_to_one):
        raise ValueError(f"{relation.name}: only a foreign key or a one-to-one loads with its row")
    # The other side of a one-to-one: the reverse relation of a forward one, or the
    # forward field of a reverse one (``OneToOneRel.field``).
    other = None
    if relation.one_to_one:
        other = relation.field if relation.auto_created else relation.remote_field

    def down(parent: Model, instance: Model | None) -> None:
        relation.set_cached_value(parent, instance)
        if other is not None and instance is not None:
            other.set_cached_value(instance, parent)

    return down


@functools.cache
def _plain(model: type[Model]) -> bool:
    """Whether making ``model`` from a whole row is only storing its values.

    ``Model.__init__`` with every column given sends ``pre_init`` and
    ``post_init`` and assigns each value to its attribute; for a model of
    Django's own ``__init__`` whose columns are plain attributes (no
    descriptor that acts on assignment), storing the values is all that
    assigning does.
    """
    return model.__init__ is Model.__init__ and all(
        type(getattr(model, name, None)) in (DeferredAttribute, ForeignKeyDeferredAttribute)
        for name in concrete_attnames(model)
    )


def from_db(model: type[Model], using: str, names: Sequence[str], values: Sequence[Any]) -> Model:
    """``model.from_db(using, names, values)`` for a whole row, at a quarter of its cost.

    Without ``Model.__init__`` when nothing listens for a model being made
    and the model is ``_plain``; else Django's own. ``names`` are the
    model's ``concrete_attnames``, one value each. Leans on how Django keeps
    a loaded instance (its values in ``__dict__``, a ``ModelState`` not
    being added, of database ``using``): ``tests/common/test_prepared.py``
    compares the two for every model.
    """
    if pre_init.receivers or post_init.receivers or not _plain(model):
        return model.from_db(using, names, values)
    instance = object.__new__(model)
    instance.__dict__.update(zip(names, values, strict=True))
    state = instance._state = ModelState()
    state.adding = False
    state.db = using
    return instance


class _NewPlan:
    """What ``model(**values)`` stores for a new instance, worked out once per model.

    ``template`` holds every column in the model's order, as ``Model.__init__``
    stores them: the default of a field whose default is a constant (none, or
    one that is not callable, which Django hands out as the same object each
    time), else a placeholder that ``makers`` replaces with a default made for
    this instance, or that a given value replaces. ``links`` are the foreign
    keys, by name.
    """

    def __init__(self, model: type[Model]) -> None:
        self.template: dict[str, Any] = {}
        self.makers: list[tuple[str, Callable[[], Any]]] = []
        self.links: dict[str, tuple[str, type[Model], str, str]] = {}
        for field in model._meta.concrete_fields:
            if _constant_default(field):
                self.template[field.attname] = field.get_default()
            else:
                self.template[field.attname] = None
                self.makers.append((field.attname, field.get_default))
            if field.many_to_one and len(field.related_fields) == 1:
                target = field.related_fields[0][1].attname
                link = (field.attname, field.related_model, target, field.cache_name)
                self.links[field.name] = link


def _constant_default(field: Field) -> bool:
    # ForeignKey's own get_default only turns a default instance into its key.
    if type(field).get_default is not Field.get_default and not (
        type(field) is ForeignKey and not field.has_default()
    ):
        return False
    if field.db_default is not NOT_PROVIDED:
        return False
    return not field.has_default() or not callable(field.default)


@functools.cache
def _new_plan(model: type[Model]) -> _NewPlan | None:
    if not _plain(model) or any(getattr(f, "generated", False) for f in model._meta.fields):
        return None
    return _NewPlan(model)


def new(model: type[Model], /, **values: Any) -> Model:
    """``model(**values)``, a new unsaved instance, at a fraction of its cost.

    ``Model.__init__`` walks every field, raising and catching a
    ``KeyError`` for each one not given, and a foreign key given as an
    instance goes through its descriptor, which asks the database routers
    whether the two may be related. Here the defaults come from a plan and,
    with no routers configured, a key and its relation's cache are set as
    the descriptor sets them. Anything else (a router, a receiver of
    ``pre_init``/``post_init``, a model that is not ``_plain``, a name that
    is not a column or a foreign key, ``DEFERRED``, a related instance of
    another class or of no or another database, a key given both ways) is
    ``model(**values)`` itself. ``tests/common/test_prepared.py`` compares
    the two for every model.
    """
    plan = _new_plan(model)
    if plan is None or pre_init.receivers or post_init.receivers or router.routers:
        return model(**values)
    instance = object.__new__(model)
    state = instance._state = ModelState()
    stored = instance.__dict__
    template = plan.template
    stored.update(template)
    for attname, make in plan.makers:
        if attname not in values:
            stored[attname] = make()
    for name, value in values.items():
        if name in template and value is not DEFERRED:
            stored[name] = value
            continue
        link = plan.links.get(name)
        if link is None or not _link(stored, state, link, value, values):
            return model(**values)
    return instance


def _link(stored: dict, state: ModelState, link: tuple, value: Any, values: dict) -> bool:
    """Set a foreign key from a related instance as its descriptor does when there are no routers.

    False where the descriptor would do more than this.
    """
    attname, related, target, cache_name = link
    if attname in values:
        return False  # Django sets the key again after the relation, and forgets the instance
    if value is None:
        stored[attname] = None
    elif (
        type(value) is related
        and value._state.db is not None
        and (state.db is None or state.db == value._state.db)
    ):
        state.db = value._state.db
        stored[attname] = getattr(value, target)
    else:
        return False
    state.fields_cache[cache_name] = value
    return True


def _connection_of(using: str, cursor) -> Any:
    """The connection of ``using``: the one that ``cursor`` (Django's, of ``using``) holds.

    ``connections[using]`` finds the thread's connection anew each time (about
    2 µs); a cursor opened by Django holds its own (``CursorWrapper.db``).
    """
    return connections[using] if cursor is None else cursor.db


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
        instances.append(from_db(model, using, names, row[start : start + len(names)]))
        start += len(names)
    return instances


def _as_is_types(field: Field, connection) -> tuple[type, ...]:
    """The value types that ``field`` saves unchanged on this connection.

    For these, ``pre_save`` and ``get_db_prep_save`` return the attribute as
    it is (a str for a text column; an int or None for an integer column or a
    key, where the backend adapts integers as they are, as SQLite does; None
    for a datetime column), so the insert can pass it straight on. Exact
    Django classes only: a subclass may convert. Any other value takes the
    full path.
    """
    kind = type(field)
    ops = type(connection.ops)
    if _plain_datetime(field):
        return (NoneType,)
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


def _plain_datetime(field: Field) -> bool:
    """Django's own datetime column, whose ``pre_save`` returns the attribute (no auto_now)."""
    return type(field) is DateTimeField and not (field.auto_now or field.auto_now_add)


def _adapters(field: Field) -> dict[type, Callable[[Any, Any], Any]]:
    """Shortcuts of ``get_db_prep_save`` by value type: ``adapt(value, connection)``.

    ``get_db_prep_save`` of a JSON or datetime column passes a dict, a list
    or an aware datetime through calls that leave it unchanged
    (``get_prep_value``, ``to_python``) on its way to the backend's adapter;
    these call the adapter alone. Exact Django classes only, whose
    ``pre_save`` returns the attribute. A naive datetime takes the full path
    (its warning and conversion).
    """
    kind = type(field)
    if kind is JSONField:
        encoder = field.encoder

        def json_value(value: Any, connection) -> Any:
            return connection.ops.adapt_json_value(value, encoder)

        return {dict: json_value, list: json_value}
    if _plain_datetime(field):

        def datetime_value(value: datetime, connection) -> Any:
            if value.utcoffset() is None:
                return field.get_db_prep_save(value, connection)
            return connection.ops.adapt_datetimefield_value(value)

        return {datetime: datetime_value}
    return {}


def _row_params(fields: Sequence[Field], connection) -> Callable[[Model, Any], list[Any]]:
    """``params(instance, connection)``: the instance's values of ``fields`` as ``Model.save()``
    would write them (see ``_as_is_types``, ``_adapters``), in straight-line code.

    A loop over the fields costs about thirty bytecodes a field (a send writes
    some thirty fields); the function reads each attribute, tests its type
    and, only for a value not written as it is, calls ``_adapted``: about ten.
    """
    return _compiled_params(
        [(f, f.attname, _as_is_types(f, connection), _adapters(f)) for f in fields]
    )


def _adapted(field: Field, adapters: dict, instance: Model, value: Any, connection) -> Any:
    """A value that is not written as it is: by its adapter, else as ``Model.save()`` does."""
    adapt = adapters.get(type(value))
    if adapt is None:
        return field.get_db_prep_save(field.pre_save(instance, True), connection)
    return adapt(value, connection)


def _compiled_params(steps) -> Callable[[Model, Any], list[Any]]:
    """``params(instance, connection)``: the steps' values in order, made without a loop."""
    names = {"_adapted": _adapted}
    lines = ["def params(instance, connection):"]
    for i, (field, attname, as_is, adapters) in enumerate(steps):
        names[f"field{i}"], names[f"as_is{i}"], names[f"adapters{i}"] = field, as_is, adapters
        names[f"attname{i}"] = attname
        read = (
            f"instance.{attname}"
            if attname.isidentifier() and not keyword.iskeyword(attname)
            else f"getattr(instance, attname{i})"
        )
        lines += [
            f"    v{i} = {read}",
            f"    if type(v{i}) not in as_is{i}:",
            f"        v{i} = _adapted(field{i}, adapters{i}, instance, v{i}, connection)",
        ]
    lines.append(f"    return [{', '.join(f'v{i}' for i in range(len(steps)))}]")
    # The text holds only the model's own attribute names (identifiers, else read with
    # getattr) and the steps' indexes: nothing a request sends.
    exec(compile("\n".join(lines), "<common.prepared row params>", "exec"), names)
    return names["params"]


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
        self._compiled: dict[str, tuple[str, Callable[[Model, Any], list[Any]]]] = {}
        self._compiled_many: dict[tuple[str, int], str] = {}

    def prepare(self, using: str = "default") -> None:
        """Build the single-row statement and the function of its parameters for ``using``, once."""
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
        self._compiled[using] = (sql, _row_params(self._fields, connection))

    def statement(
        self, instances: Sequence[Model], using: str = "default"
    ) -> tuple[str, list[Any], str]:
        """The INSERT of ``instances`` (no RETURNING), its parameters and the key's column.

        For ``Writes``, which may put a ``Ref`` in place of a parameter.
        """
        connection = connections[using]
        self.prepare(using)
        _, params_of = self._compiled[using]
        sql = self._compiled_many.get((using, len(instances)))
        if sql is None:
            quote = connection.ops.quote_name
            columns = ", ".join(quote(f.column) for f in self._fields)
            marks = "(" + ", ".join(["%s"] * len(self._fields)) + ")"
            sql = self._compiled_many[(using, len(instances))] = (
                f"INSERT INTO {quote(self._model._meta.db_table)} ({columns}) "
                f"VALUES {', '.join([marks] * len(instances))}"
            )
        params = [value for i in instances for value in params_of(i, connection)]
        return sql, params, connection.ops.quote_name(self._model._meta.pk.column)

    def insert(self, instance: Model, using: str = "default", cursor=None) -> None:
        connection = _connection_of(using, cursor)
        compiled = self._compiled.get(using)
        if compiled is None:
            self.prepare(using)
            compiled = self._compiled[using]
        sql, params_of = compiled
        params = params_of(instance, connection)
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
        rows, params, _ = self.statement(instances, using)
        if cursor is None:
            with connections[using].cursor() as cursor:
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
        connection = _connection_of(using, cursor)
        sql, params = self.statement(pks, where_params, using, values, connection)
        if cursor is None:
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
                return cursor.rowcount
        cursor.execute(sql, params)
        return cursor.rowcount

    def statement(
        self,
        pks: Sequence[Any],
        where_params: Sequence[Any],
        using: str,
        values: dict[str, Any],
        connection: Any = None,
    ) -> tuple[str, list[Any]]:
        """The UPDATE's SQL and parameters, for ``_run`` and for ``Writes``.

        ``connection``: that of ``using``, if the caller has it at hand.
        """
        if connection is None:
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
        return sql, params


@functools.lru_cache(maxsize=256)
def _with_subqueries(sql: str, count: int, subqueries: tuple[tuple[int, str, str], ...]) -> str:
    """``sql`` with its placeholders at ``(position, part, key)`` each reading that key
    from that part's RETURNING. The same few statements come back with every unit of
    work, so each is written once rather than placeholder by placeholder each time."""
    pieces = sql.split("%s")
    if len(pieces) != count + 1:
        raise ValueError(f"{count} parameters for {len(pieces) - 1} placeholders")
    placeholders = ["%s"] * count
    for position, part, key in subqueries:
        placeholders[position] = f"(SELECT {key} FROM {part})"
    return pieces[0] + "".join(p + piece for p, piece in zip(placeholders, pieces[1:], strict=True))


class Ref:
    """A parameter of ``Writes``: the key of an instance that the same ``Writes`` inserts."""

    __slots__ = ("instance",)

    def __init__(self, instance: Model) -> None:
        self.instance = instance


class Writes:
    """The writes of one unit of work, sent as one statement on PostgreSQL.

    Add each INSERT and UPDATE in the order it would run. On PostgreSQL they
    wait, and ``run()`` sends them as one statement of data-modifying CTEs,

        WITH w0 AS (INSERT ... RETURNING id), w1 AS (INSERT ... VALUES ((SELECT id FROM w0), ...)),
             w2 AS (UPDATE ...)
        SELECT (SELECT id FROM w0), ...

    one round trip where each write alone costs one (a durable send waits
    for its commit anyway; the trips before it are what the server can save).
    A write that needs the key of an earlier insert passes ``Ref(instance)``
    for it (``refs`` of ``insert`` and ``insert_many``, or among ``execute``'s
    parameters; not to ``update``). Elsewhere (SQLite: no data-modifying CTEs, and no round trips to
    save) each write runs as it is added, on ``cursor``, and a ``Ref`` is the
    key that insert just got: one statement per write, as ``PreparedInsert``
    and ``PreparedUpdate`` run them alone.

    On PostgreSQL every part of the statement sees the database as it was
    when the statement began, and sees another part's rows only through its
    RETURNING: so the writes of one ``Writes`` may not touch the same row,
    nor read what another writes (they never do: each inserts or updates its
    own row). Every part runs to completion whether or not it is read. A
    failing part (a unique key) fails the statement, and so the transaction,
    as it would have failed alone. Foreign keys are checked at the commit
    (Django declares them deferrable), when every row is there.
    """

    def __init__(self, cursor=None, using: str = "default") -> None:
        """``cursor``: an open cursor of ``using`` to run on, else one is opened per statement."""
        self.cursor = cursor
        self.using = using
        self._connection = _connection_of(using, cursor)
        self.together = self._connection.vendor == "postgresql"
        # Per part: its SQL with %s for each parameter, the parameters, the key's
        # column, the instance whose key it returns and where its Refs are.
        self._parts: list[tuple[str, list[Any], str, Model | None, list[int]]] = []
        self._refs: list[tuple[Model, str, Model]] = []  # (instance, attname, referenced)
        self._selects: list[tuple[str, list[Any]]] = []

    def insert(
        self, prepared: PreparedInsert, instance: Model, *, refs: dict[str, Model] | None = None
    ) -> None:
        """Insert ``instance``; its key is set by the time ``run()`` returns (at once on SQLite).

        ``refs``: attributes (``message_id``) that take the key of another
        instance: one inserted earlier by these writes, or by anything before.
        """
        if not self.together:
            for attname, referenced in (refs or {}).items():
                setattr(instance, attname, referenced.pk)
            prepared.insert(instance, using=self.using, cursor=self.cursor)
            return
        sql, params, key = prepared.statement([instance], self.using)
        at = self._refer(prepared, [instance], params, refs)
        self._parts.append((sql, params, key, instance, at))

    def insert_many(
        self,
        prepared: PreparedInsert,
        instances: Sequence[Model],
        *,
        refs: dict[str, Model] | None = None,
    ) -> None:
        """Insert ``instances`` in one part; their keys are not read back (``insert_many``)."""
        if not self.together:
            for instance in instances:
                for attname, referenced in (refs or {}).items():
                    setattr(instance, attname, referenced.pk)
            prepared.insert_many(instances, using=self.using, cursor=self.cursor)
            return
        sql, params, key = prepared.statement(instances, self.using)
        at = self._refer(prepared, instances, params, refs)
        self._parts.append((sql, params, key, None, at))

    def update(self, prepared: PreparedUpdate, pk: Any, *where_params: Any, **values: Any) -> None:
        """``prepared.update(pk, ...)``, as one part (its count of rows is not read)."""
        if not self.together:
            prepared.update(pk, *where_params, using=self.using, cursor=self.cursor, **values)
            return
        sql, params = prepared.statement([pk], where_params, self.using, values, self._connection)
        self._parts.append((sql, params, "", None, []))

    def execute(self, sql: str, params: Sequence[Any]) -> None:
        """Any other write: ``sql`` with ``%s`` per parameter, a ``Ref`` among them."""
        params = list(params)
        if not self.together:
            params = [p.instance.pk if isinstance(p, Ref) else p for p in params]
            if self.cursor is None:
                with connections[self.using].cursor() as cursor:
                    cursor.execute(sql, params)
            else:
                self.cursor.execute(sql, params)
            return
        at = [i for i, value in enumerate(params) if type(value) is Ref]
        self._parts.append((sql, params, "", None, at))

    def select(self, sql: str, params: Sequence[Any] = ()) -> None:
        """An expression for the statement's SELECT (PostgreSQL only: ``together``)."""
        if not self.together:
            raise ValueError("only writes sent together have a SELECT")
        self._selects.append((sql, list(params)))

    def run(self) -> list[Any]:
        """Send what waits (PostgreSQL); the values of the ``select`` expressions."""
        if not self.together or not (self._parts or self._selects):
            return []
        # The part that inserts each instance: its name and its key's column.
        inserted = {
            id(instance): (f"w{i}", key)
            for i, (_, _, key, instance, _) in enumerate(self._parts)
            if instance is not None
        }
        ctes, params, keys, returned = [], [], [], []
        for i, (sql, part_params, key, instance, at) in enumerate(self._parts):
            name = f"w{i}"
            if at:
                subqueries = []
                for j in at:
                    found = inserted.get(id(part_params[j].instance))
                    if found is None:
                        raise ValueError("a Ref names an instance that these writes do not insert")
                    subqueries.append((j, *found))
                sql = _with_subqueries(sql, len(part_params), tuple(subqueries))
                skipped = set(at)
                params += [v for j, v in enumerate(part_params) if j not in skipped]
            else:
                params += part_params
            if instance is not None:
                sql = f"{sql} RETURNING {key}"
                keys.append(f"(SELECT {key} FROM {name})")
                returned.append(instance)
            ctes.append(f"{name} AS ({sql})")
        selects = keys + [sql for sql, _ in self._selects]
        for _, select_params in self._selects:
            params.extend(select_params)
        statement = f"WITH {', '.join(ctes)} SELECT {', '.join(selects) or '1'}"
        if self.cursor is None:
            with connections[self.using].cursor() as cursor:
                cursor.execute(statement, params)
                row = cursor.fetchone()
        else:
            self.cursor.execute(statement, params)
            row = self.cursor.fetchone()
        for instance, value in zip(returned, row, strict=False):
            instance.pk = value
            instance._state.adding = False
            instance._state.db = self.using
        for instance, attname, target in self._refs:
            setattr(instance, attname, target.pk)
        self._parts, self._refs, self._selects = [], [], []
        return list(row[len(returned) :])

    def _refer(
        self,
        prepared: PreparedInsert,
        instances: Sequence[Model],
        params: list[Any],
        refs: dict[str, Model] | None,
    ) -> list[int]:
        """Put a ``Ref`` in ``params`` for each attribute of ``refs``, row by row; where."""
        at: list[int] = []
        if not refs:
            return at
        attnames = [f.attname for f in prepared._fields]
        width = len(attnames)
        for attname, target in refs.items():
            column = attnames.index(attname)
            for row, instance in enumerate(instances):
                if target.pk is not None:  # inserted before: its key is known
                    setattr(instance, attname, target.pk)
                    params[row * width + column] = target.pk
                    continue
                params[row * width + column] = Ref(target)
                at.append(row * width + column)
                self._refs.append((instance, attname, target))
        return sorted(at)
