"""Queries compiled once per process give what the ORM would give."""

from __future__ import annotations

import json
import warnings
from datetime import UTC, datetime, timedelta, timezone
from types import NoneType

import pytest
from django.apps import apps
from django.db import IntegrityError, connection, connections, transaction
from django.db.models import DEFERRED, CharField, Count, DateTimeField, F, JSONField, Q
from django.db.models.signals import post_init
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from common.prepared import (
    Prepared,
    PreparedInsert,
    PreparedObjects,
    PreparedUpdate,
    Writes,
    _adapters,
    _as_is_types,
    _compiled_params,
    _connection_of,
    _faster,
    _new_plan,
    _plain,
    _with_subqueries,
    concrete_attnames,
    from_db,
    instances_from_row,
    new,
)
from mailbox.models import AgentName, McpSession, Session
from rooms.models import Event, Member, Message
from rooms.services import room_create
from tests.factories import ProjectKeyFactory, SessionFactory


def _sessions_named(handle):
    return (
        Session.objects.filter(name__handle=handle)
        .order_by("id")
        .values_list("id", "started_at", "name__handle")
    )


@pytest.fixture
def sessions(workspace):
    return [SessionFactory(workspace=workspace, name=n) for n in ("ann", "ben", "cy")]


def test_rows_equal_the_orm_for_each_set_of_parameters(sessions):
    prepared = Prepared(_sessions_named, params=["handle"])

    for session in sessions:
        rows = prepared.rows(handle=session.name.handle)

        assert rows == [list(row) for row in _sessions_named(session.name.handle)]
        assert isinstance(rows[0][1], datetime)  # converters ran, as the ORM's do
    assert prepared.rows(handle="nobody") == []


def test_sql_is_built_once_and_the_query_is_the_orms(sessions):
    built = []

    def build(handle):
        built.append(handle)
        return _sessions_named(handle)

    prepared = Prepared(build, params=["handle"])
    with CaptureQueriesContext(connection) as queries:
        prepared.rows(handle="ann")
        prepared.rows(handle="ben")
        list(_sessions_named("ben"))

    assert len(built) == 1
    first, second, by_the_orm = (q["sql"] for q in queries.captured_queries)
    assert second == by_the_orm != first


def test_several_parameters_of_several_types_fill_their_own_places(sessions):
    def build(low, high, handle):
        return (
            AgentName.objects.filter(Q(id__gte=low, id__lte=high) | Q(handle=handle))
            .order_by()
            .values("workspace_id")
            .annotate(n=Count("id"))
            .values_list("n")
        )

    prepared = Prepared(build, params=["low", "high", "handle"])
    ids = sorted(s.name_id for s in sessions)

    assert prepared.rows(low=ids[0], high=ids[0], handle="cy") == [[2]]
    assert prepared.rows(low=ids[0], high=ids[2], handle="nobody") == [[3]]
    assert prepared.rows(low=0, high=0, handle="ben") == [[1]]


def test_a_parameter_the_query_does_not_use_is_refused(db):
    prepared = Prepared(lambda handle, unused: _sessions_named(handle), params=["handle", "unused"])

    with pytest.raises(ValueError, match="unused"):
        prepared.rows(handle="ann", unused=1)


def test_a_row_splits_into_one_instance_per_model(sessions):
    session = sessions[0]
    row = (
        Session.objects.filter(pk=session.pk)
        .values_list(
            *concrete_attnames(Session), *(f"name__{f}" for f in concrete_attnames(AgentName))
        )
        .get()
    )

    loaded, name = instances_from_row(row, Session, AgentName)

    assert (loaded.pk, loaded.token_prefix, loaded.started_at) == (
        session.pk,
        session.token_prefix,
        session.started_at,
    )
    assert (name.pk, name.handle) == (session.name_id, "ann")
    assert not loaded._state.adding


def test_objects_come_wired_to_their_related_rows_as_select_related_wires_them(sessions):
    prepared = PreparedObjects(
        lambda handle: Session.objects.filter(name__handle=handle).annotate(twice=F("id") * 2),
        params=["handle"],
        related=["name", "workspace__project"],
        annotations=["twice"],
    )
    by_the_orm = Session.objects.select_related("name", "workspace__project").get(
        name__handle="ben"
    )

    with CaptureQueriesContext(connection) as queries:
        found = prepared.first(handle="ben")
        session = found[""]
        seen = (session.name.handle, session.workspace.slug, session.workspace.project.slug)

    assert len(queries) == 1  # the related rows came with it
    assert session.pk == by_the_orm.pk
    assert session.twice == 2 * by_the_orm.pk
    assert seen == (
        by_the_orm.name.handle,
        by_the_orm.workspace.slug,
        by_the_orm.workspace.project.slug,
    )
    assert found["workspace__project"] is session.workspace.project
    assert prepared.first(handle="nobody") is None


def test_a_null_foreign_key_loads_as_none_and_a_reverse_row_points_back(sessions, workspace):
    key = ProjectKeyFactory(project=workspace.project)
    prepared = PreparedObjects(
        lambda pk, prefix: Session.objects.filter(pk=pk, workspace__project__keys__prefix=prefix),
        params=["pk", "prefix"],
        related=["project_key", "workspace__project__keys"],
    )
    Session.objects.filter(pk=sessions[0].pk).update(project_key=None)

    found = prepared.first(pk=sessions[0].pk, prefix=key.prefix)

    assert found[""].project_key is None
    assert found["workspace__project__keys"].pk == key.pk
    assert found["workspace__project__keys"].project is found["workspace__project"]


def test_a_one_to_one_comes_wired_both_ways_from_either_side(sessions):
    session = sessions[0]
    mcp = McpSession.objects.create(session=session)
    forward = PreparedObjects(
        lambda pk: McpSession.objects.filter(pk=pk), params=["pk"], related=["session"]
    )
    reverse = PreparedObjects(
        lambda pk: Session.objects.filter(pk=pk), params=["pk"], related=["mcp_session"]
    )

    with CaptureQueriesContext(connection) as queries:
        by_mcp = forward.first(pk=mcp.pk)
        by_session = reverse.first(pk=session.pk)
        without = reverse.first(pk=sessions[1].pk)[""]
        assert by_mcp[""].session is by_mcp["session"]
        assert by_mcp["session"].mcp_session is by_mcp[""]
        assert by_session[""].mcp_session is by_session["mcp_session"]
        assert by_session["mcp_session"].session is by_session[""]
        with pytest.raises(Session.mcp_session.RelatedObjectDoesNotExist):
            without.mcp_session  # noqa: B018 - the cached "none", as select_related leaves it

    assert len(queries) == 3  # one per load: every related row came with its own
    assert by_mcp["session"].pk == session.pk
    assert by_session["mcp_session"].pk == mcp.pk


# from_db leans on how Django keeps a loaded instance; these pin it, for every model.
_MODELS = apps.get_models()


@pytest.mark.parametrize("model", _MODELS, ids=[m._meta.label for m in _MODELS])
def test_an_instance_made_from_a_row_is_the_one_django_makes(model):
    names = concrete_attnames(model)
    values = [object() for _ in names]

    ours = from_db(model, "other", names, values)
    djangos = model.from_db("other", names, values)

    assert type(ours) is model
    assert vars(ours).keys() == vars(djangos).keys()
    for name in names:
        assert getattr(ours, name) is getattr(djangos, name)
    assert (ours._state.adding, ours._state.db, ours._state.fields_cache) == (False, "other", {})
    assert (djangos._state.adding, djangos._state.db, djangos._state.fields_cache) == (
        False,
        "other",
        {},
    )


def test_every_model_of_plumb_is_made_the_short_way():
    ours = [m for m in _MODELS if m._meta.app_label in ("mailbox", "rooms")]

    assert ours
    assert [m._meta.label for m in ours if not _plain(m)] == []


def test_a_listener_for_models_being_made_still_hears_of_them():
    names = concrete_attnames(AgentName)
    heard = []

    def listener(sender, instance, **kwargs):
        heard.append(instance)

    post_init.connect(listener, sender=AgentName)
    try:
        made = from_db(AgentName, "default", names, [object() for _ in names])
    finally:
        post_init.disconnect(listener, sender=AgentName)

    assert len(heard) == 1
    assert heard[0] is made


@pytest.fixture
def patched(monkeypatch):
    """``monkeypatch`` for a model; what ``_plain`` remembered goes before the patches do."""
    yield monkeypatch
    _plain.cache_clear()
    _new_plan.cache_clear()


def test_a_model_of_its_own_init_is_made_by_django(patched):
    names = concrete_attnames(AgentName)
    made = []

    def own_init(self, *args, **kwargs):
        made.append((args, kwargs))
        super(AgentName, self).__init__(*args, **kwargs)

    patched.setattr(AgentName, "__init__", own_init)
    _plain.cache_clear()
    _new_plan.cache_clear()

    assert not _plain(AgentName)
    from_db(AgentName, "default", names, list(range(len(names))))
    new(AgentName, handle="ann")
    assert made == [(tuple(range(len(names))), {}), ((), {"handle": "ann"})]


def test_a_model_with_a_column_that_acts_on_assignment_is_made_by_django(patched):
    patched.setattr(AgentName, "handle", property(lambda self: "", lambda self, value: None))
    _plain.cache_clear()

    assert not _plain(AgentName)


# new() leans on what Model.__init__ stores for a new instance; these pin it, for every model.


def _column_fields(model):
    return [f for f in model._meta.concrete_fields]


def _made_defaults(model):
    """The columns whose default is made for each instance (a callable): equal in type only."""
    return {f.attname for f in _column_fields(model) if f.has_default() and callable(f.default)}


def _assert_same_new(ours, djangos, made=frozenset()):
    assert type(ours) is type(djangos)
    assert list(vars(ours)) == list(vars(djangos))  # the same columns, in Django's order
    for name, value in vars(djangos).items():
        if name == "_state":
            continue
        if name in made:
            assert type(getattr(ours, name)) is type(value), name
        else:
            assert getattr(ours, name) is value or getattr(ours, name) == value, name
    assert (ours._state.adding, ours._state.db) == (djangos._state.adding, djangos._state.db)
    assert ours._state.fields_cache.keys() == djangos._state.fields_cache.keys()
    for name, value in djangos._state.fields_cache.items():
        # Each made from its own related instances: the same kind, linked the same way.
        assert type(ours._state.fields_cache[name]) is type(value), name


def _related(field, db="other"):
    """An instance of what ``field`` points at, as if loaded from ``db``."""
    instance = field.related_model()
    setattr(instance, field.related_fields[0][1].attname, 41)
    instance._state.db = db
    instance._state.adding = False
    return instance


def _keys(model):
    return [f for f in _column_fields(model) if f.many_to_one]


@pytest.mark.parametrize("model", _MODELS, ids=[m._meta.label for m in _MODELS])
def test_a_new_instance_with_nothing_given_is_the_one_django_makes(model):
    _assert_same_new(new(model), model(), made=_made_defaults(model))


@pytest.mark.parametrize("model", _MODELS, ids=[m._meta.label for m in _MODELS])
def test_a_new_instance_with_every_column_given_is_the_one_django_makes(model):
    values = {name: object() for name in concrete_attnames(model)}

    ours, djangos = new(model, **values), model(**values)

    _assert_same_new(ours, djangos)
    for name, value in values.items():
        assert getattr(ours, name) is value


_WITH_KEYS = [m for m in _MODELS if _keys(m)]


@pytest.mark.parametrize("model", _WITH_KEYS, ids=[m._meta.label for m in _WITH_KEYS])
def test_foreign_keys_given_as_instances_link_as_django_links_them(model):
    ours_values = {f.name: _related(f) for f in _keys(model)}
    djangos_values = {f.name: _related(f) for f in _keys(model)}

    ours, djangos = new(model, **ours_values), model(**djangos_values)

    _assert_same_new(ours, djangos, made=_made_defaults(model))
    for field in _keys(model):
        assert ours._state.fields_cache[field.name] is ours_values[field.name]
        assert getattr(ours, field.attname) == 41
        assert getattr(ours, field.name) is ours_values[field.name]  # no query: cached
    assert ours._state.db == "other"


@pytest.mark.parametrize("model", _WITH_KEYS, ids=[m._meta.label for m in _WITH_KEYS])
def test_foreign_keys_given_as_none_are_none_and_cached_as_django_caches_them(model):
    values = {f.name: None for f in _keys(model)}

    _assert_same_new(new(model, **values), model(**values), made=_made_defaults(model))


def test_a_related_instance_of_no_database_is_given_one_as_django_gives_it():
    ours_room, djangos_room = _related(Message.room.field, None), _related(Message.room.field, None)

    ours, djangos = new(Message, room=ours_room), Message(room=djangos_room)

    _assert_same_new(ours, djangos, made=_made_defaults(Message))
    assert ours_room._state.db == djangos_room._state.db == "default"
    assert ours._state.db == "default"


def test_related_instances_of_two_databases_are_refused_as_django_refuses_them():
    def made(make, model):
        return make(
            model,
            room=_related(model.room.field, "other"),
            author=_related(model.author.field, "default"),
        )

    refused = "the current database router prevents this relation"
    with pytest.raises(ValueError, match=refused) as djangos:
        made(lambda model, **values: model(**values), Message)
    with pytest.raises(ValueError, match=refused) as ours:
        made(new, Message)

    assert str(ours.value) == str(djangos.value)


def test_what_is_not_a_column_or_a_key_is_refused_or_taken_as_django_does():
    room = _related(Message.room.field)
    with pytest.raises(TypeError) as djangos:
        Message(room=room, colour="red")
    with pytest.raises(TypeError) as ours:
        new(Message, room=room, colour="red")
    assert str(ours.value) == str(djangos.value)

    with pytest.raises(ValueError, match=r"must be a .Room. instance") as djangos:
        Message(room=_related(Message.author.field))
    with pytest.raises(ValueError, match=r"must be a .Room. instance") as ours:
        new(Message, room=_related(Message.author.field))
    assert str(ours.value) == str(djangos.value)

    # A key given both ways: Django sets the column after the relation, which
    # forgets the related instance; a deferred value is left unset.
    for values in (
        {"room": room, "room_id": 7},
        {"room_id": 7, "room": room},
        {"room": room, "body": DEFERRED},
    ):
        _assert_same_new(new(Message, **values), Message(**values), made=_made_defaults(Message))
    assert "room" not in new(Message, room=room, room_id=7)._state.fields_cache
    assert "body" not in vars(new(Message, body=DEFERRED))


def test_a_default_made_for_each_instance_is_made_for_each_and_only_when_missing(monkeypatch):
    made = []
    field = Message._meta.get_field("public_id")
    monkeypatch.setattr(field, "default", lambda: made.append(1) or f"msg_{len(made)}")
    monkeypatch.delattr(field, "_get_default", raising=False)  # Django's cached maker
    _new_plan.cache_clear()
    try:
        first, second = new(Message), new(Message)
        given = new(Message, public_id="msg_given")
    finally:
        _new_plan.cache_clear()

    assert (first.public_id, second.public_id, given.public_id) == ("msg_1", "msg_2", "msg_given")
    assert len(made) == 2
    assert first.mentions == []
    assert first.mentions is not second.mentions  # default=list, made for each


class _Router:
    """A router that says no to every relation, to show that new() asks it."""

    def allow_relation(self, obj1, obj2, **hints):
        return False


def test_with_a_router_the_router_is_asked():
    refused = "the current database router prevents this relation"
    with (
        override_settings(DATABASE_ROUTERS=[f"{__name__}._Router"]),
        pytest.raises(ValueError, match=refused),
    ):
        new(Message, room=_related(Message.room.field))


def test_a_listener_for_new_models_hears_of_them():
    heard = []

    def listener(sender, instance, **kwargs):
        heard.append(instance)

    post_init.connect(listener, sender=Message)
    try:
        made = new(Message, body="hello")
    finally:
        post_init.disconnect(listener, sender=Message)

    assert heard == [made]


def test_every_model_of_plumb_is_made_new_the_short_way():
    ours = [m for m in _MODELS if m._meta.app_label in ("mailbox", "rooms")]

    assert [m._meta.label for m in ours if _new_plan(m) is None] == []


def test_objects_keep_an_explicit_order_and_drop_the_models_default(sessions):
    ordered = PreparedObjects(
        lambda workspace_id: Session.objects.filter(workspace_id=workspace_id).order_by("id"),
        params=["workspace_id"],
    )
    unordered = PreparedObjects(
        lambda workspace_id: Session.objects.filter(workspace_id=workspace_id),
        params=["workspace_id"],
    )
    workspace_id = sessions[0].workspace_id

    with CaptureQueriesContext(connection) as queries:
        found = ordered.all(workspace_id=workspace_id)
        unordered.all(workspace_id=workspace_id)

    assert [f[""].pk for f in found] == sorted(s.pk for s in sessions)
    assert "ORDER BY" in queries[0]["sql"]
    assert "ORDER BY" not in queries[1]["sql"]  # Session's Meta ordering costs a sort


def test_an_insert_stores_what_save_would_store(sessions):
    room = room_create(sessions[0], slug="lab").room
    fields = dict(room=room, kind=Event.Kind.MODERATION, actor=sessions[0].name, data={"a": [1]})
    by_save = Event.objects.create(seq=2, **fields)
    prepared = Event(seq=3, **fields)

    PreparedInsert(Event).insert(prepared)

    assert prepared.pk is not None
    assert not prepared._state.adding
    stored = Event.objects.values().get(pk=prepared.pk)
    expected = Event.objects.values().get(pk=by_save.pk)
    differing = {"id", "seq", "created_at"}
    assert {k: v for k, v in stored.items() if k not in differing} == {
        k: v for k, v in expected.items() if k not in differing
    }
    assert stored["created_at"] == prepared.created_at  # the default was taken on the instance


def test_several_inserts_in_one_statement_store_what_save_would_store(sessions):
    room = room_create(sessions[0], slug="lab").room
    fields = dict(room=room, kind=Event.Kind.MODERATION, actor=sessions[0].name, data={"a": [1]})
    by_save = Event.objects.create(seq=2, **fields)
    rows = [Event(seq=3, **fields), Event(seq=4, **{**fields, "data": {"b": 2}})]

    with CaptureQueriesContext(connection) as captured:
        PreparedInsert(Event).insert_many(rows)

    assert len(captured) == 1
    stored = list(Event.objects.filter(seq__in=[3, 4]).order_by("seq").values())
    expected = Event.objects.values().get(pk=by_save.pk)
    differing = {"id", "seq", "created_at", "data"}
    for row in stored:
        assert {k: v for k, v in row.items() if k not in differing} == {
            k: v for k, v in expected.items() if k not in differing
        }
    assert [(row["seq"], row["data"], row["created_at"]) for row in stored] == [
        (3, {"a": [1]}, rows[0].created_at),
        (4, {"b": 2}, rows[1].created_at),
    ]


def test_an_update_changes_only_the_rows_its_condition_allows(sessions):
    room_create(sessions[0], slug="lab")
    member = Member.objects.get(room__slug="lab")
    Member.objects.filter(pk=member.pk).update(read_seq=5)
    advance = PreparedUpdate(Member, ["read_seq"], where='"read_seq" < %s')

    assert advance.update(member.pk, 3, read_seq=3) == 0
    assert advance.update(member.pk, 9, read_seq=9) == 1
    member.refresh_from_db()
    assert member.read_seq == 9


def test_an_update_of_several_keys_changes_only_those_its_condition_allows(sessions):
    for slug in ("a", "b", "c"):
        room_create(sessions[0], slug=slug)
    members = list(Member.objects.order_by("pk"))
    Member.objects.filter(pk=members[1].pk).update(read_seq=7)
    advance = PreparedUpdate(Member, ["read_seq"], where='"read_seq" < %s')

    assert advance.update_in([], 5, read_seq=5) == 0
    assert advance.update_in([m.pk for m in members[:2]], 5, read_seq=5) == 1
    assert advance.update_in([members[2].pk], 5, read_seq=5) == 1
    assert list(Member.objects.order_by("pk").values_list("read_seq", flat=True)) == [5, 7, 5]


@pytest.mark.parametrize("model", [Event, Message])
def test_values_passed_as_they_are_are_what_the_field_would_save(model):
    samples = {str: ["", "x", "é\u2028"], int: [0, 7, -(2**63)], NoneType: [None]}
    for field in model._meta.concrete_fields:
        for kind in _as_is_types(field, connection):
            for value in samples[kind]:
                assert field.get_db_prep_save(value, connection) is value, (field, value)


def _saved(value):
    """What a driver is handed, comparable (PostgreSQL's JSON wrapper has no ``==``)."""
    if hasattr(value, "obj") and hasattr(value, "dumps"):
        return (type(value), value.dumps(value.obj))
    return (type(value), value)


@pytest.mark.parametrize("model", [Event, Message])
def test_adapted_values_are_what_the_field_would_save(model):
    aware = datetime(2026, 3, 29, 1, 30, 5, 7, tzinfo=UTC)
    samples = {
        dict: [{}, {"unseen_before_send": 3, "é": ["\u2028", None]}],
        list: [[], [{"handle": "ann", "display_name": "Ann"}]],
        datetime: [aware, aware.astimezone(timezone(timedelta(hours=-7)))],
    }
    adapted = 0
    for field in model._meta.concrete_fields:
        for kind, adapt in _adapters(field).items():
            for value in samples[kind]:
                expected = field.get_db_prep_save(value, connection)
                assert _saved(adapt(value, connection)) == _saved(expected), (field, value)
                adapted += 1
    assert adapted  # the send's JSON and datetime columns take these


def test_a_naive_datetime_takes_the_full_path(db):
    field = Message._meta.get_field("created_at")
    naive = datetime(2026, 3, 29, 1, 30, 5)  # noqa: DTZ001 -- naive on purpose

    with pytest.warns(RuntimeWarning, match="naive datetime"):
        value = _adapters(field)[datetime](naive, connection)
    with pytest.warns(RuntimeWarning, match="naive datetime"):
        assert value == field.get_db_prep_save(naive, connection)


def test_as_is_only_for_exact_types_of_plain_fields(db):
    class Upper(CharField):
        def get_prep_value(self, value):
            return value.upper()

    assert _as_is_types(Upper(max_length=5), connection) == ()
    assert _adapters(Upper(max_length=5)) == {}
    assert _as_is_types(DateTimeField(auto_now=True), connection) == ()
    assert _adapters(DateTimeField(auto_now_add=True)) == {}
    assert _as_is_types(Message._meta.get_field("created_at"), connection) == (NoneType,)
    assert _as_is_types(Message._meta.get_field("mentions"), connection) == ()
    assert _as_is_types(Message._meta.get_field("seq"), connection) in [(int, NoneType), ()]


def test_a_message_insert_stores_what_save_would_store(sessions):
    room = room_create(sessions[0], slug="lab").room
    fields = dict(
        room=room,
        author=sessions[0].name,
        body="hello",
        idempotency_key=None,
        mentions=[{"handle": "ann"}],
        send_report={"unseen_before_send": 0},
    )
    by_save = Message.objects.create(seq=2, ordinal=1, **fields)
    prepared = Message(seq=3, ordinal=2, **fields)

    PreparedInsert(Message).insert(prepared)

    stored = Message.objects.values().get(pk=prepared.pk)
    expected = Message.objects.values().get(pk=by_save.pk)
    differing = {"id", "public_id", "seq", "ordinal", "created_at"}
    assert {k: v for k, v in stored.items() if k not in differing} == {
        k: v for k, v in expected.items() if k not in differing
    }
    assert stored["public_id"] == prepared.public_id


def test_statements_can_share_the_callers_cursor(sessions):
    room = room_create(sessions[0], slug="lab").room
    member = Member.objects.get(room=room)
    advance = PreparedUpdate(Member, ["read_seq"], where='"read_seq" < %s')
    lookup = Prepared(
        lambda pk: Member.objects.filter(pk=pk).values_list("read_seq"), params=["pk"]
    )
    event = Event(room=room, seq=2, kind=Event.Kind.MODERATION)

    with transaction.atomic(), connection.cursor() as cursor:
        PreparedInsert(Event).insert(event, cursor=cursor)
        assert advance.update(member.pk, 2, cursor=cursor, read_seq=2) == 1
        assert lookup.rows(cursor=cursor, pk=member.pk) == [[2]]

    assert Event.objects.get(pk=event.pk).seq == 2


def _message(room, name, seq, **fields):
    return Message(room=room, seq=seq, ordinal=seq, author_ordinal=seq, author=name, **fields)


def test_writes_store_what_the_statements_alone_would_and_set_the_keys(sessions):
    room = room_create(sessions[0], slug="lab").room
    member = Member.objects.get(room=room)
    name = sessions[0].name
    message = _message(room, name, 2, body="hello")
    event = Event(room=room, seq=2, kind=Event.Kind.MESSAGE, actor=name, message=message)
    advance = PreparedUpdate(Member, ["read_seq"], where='"read_seq" < %s')

    with (
        transaction.atomic(),
        CaptureQueriesContext(connection) as captured,
        connection.cursor() as cursor,
    ):
        writes = Writes(cursor)
        writes.insert(PreparedInsert(Message), message)
        writes.insert(PreparedInsert(Event), event, refs={"message_id": message})
        writes.update(advance, member.pk, 2, read_seq=2)
        writes.run()

    # One statement on PostgreSQL, where a round trip each would cost; one each on SQLite.
    assert len(captured) == (1 if connection.vendor == "postgresql" else 3)
    assert message.pk is not None
    assert event.pk is not None
    assert not message._state.adding
    assert event.message_id == message.pk
    stored = Event.objects.select_related("message").get(pk=event.pk)
    assert (stored.seq, stored.message.body, stored.message.pk) == (2, "hello", message.pk)
    assert Member.objects.get(pk=member.pk).read_seq == 2


def test_several_rows_take_the_key_of_an_earlier_insert_and_selects_come_back(sessions):
    room = room_create(sessions[0], slug="lab").room
    name = sessions[0].name
    message = _message(room, name, 2, body="hello")
    events = [Event(room=room, seq=s, kind=Event.Kind.MESSAGE, actor=name) for s in (2, 3)]

    with transaction.atomic(), connection.cursor() as cursor:
        writes = Writes(cursor)
        writes.insert(PreparedInsert(Message), message)
        writes.insert_many(PreparedInsert(Event), events, refs={"message_id": message})
        if writes.together:
            writes.select("%s + 1", [41])
        assert writes.run() == ([42] if writes.together else [])

    assert [e.message_id for e in events] == [message.pk, message.pk]
    assert list(
        Event.objects.filter(seq__in=[2, 3]).order_by("seq").values_list("message_id", flat=True)
    ) == [message.pk, message.pk]


def test_a_write_that_fails_fails_the_others_with_it(sessions):
    room = room_create(sessions[0], slug="lab").room
    name = sessions[0].name
    first = _message(room, name, 2, body="one")
    PreparedInsert(Message).insert(first)
    before = Event.objects.count()

    def store_both() -> None:
        with transaction.atomic(), connection.cursor() as cursor:
            writes = Writes(cursor)
            writes.insert(PreparedInsert(Event), Event(room=room, seq=9, kind=Event.Kind.JOIN))
            writes.insert(PreparedInsert(Message), _message(room, name, 2, body="same seq"))
            writes.run()

    with pytest.raises(IntegrityError):
        store_both()

    assert Event.objects.count() == before
    assert list(Message.objects.values_list("body", flat=True)) == ["one"]


@pytest.mark.postgresql  # on SQLite each write runs as it is added: there is no Ref to refuse
def test_a_ref_to_an_instance_the_writes_do_not_insert_is_refused(sessions):
    room = room_create(sessions[0], slug="lab").room
    stranger = _message(room, sessions[0].name, 2, body="never inserted")
    event = Event(room=room, seq=2, kind=Event.Kind.MESSAGE)

    with transaction.atomic(), connection.cursor() as cursor:
        writes = Writes(cursor)
        assert writes.together
        writes.insert(PreparedInsert(Event), event, refs={"message_id": stranger})
        with pytest.raises(ValueError, match="Ref"):
            writes.run()


@pytest.mark.postgresql  # SQLite has no planner to spare: it caches its statements itself
def test_postgresql_plans_a_statement_a_connection_runs_again_once(sessions):
    """psycopg prepares a statement the second time a connection runs it (Django
    turns that off unless the settings turn it on): PostgreSQL then plans it once."""
    prepared = Prepared(_sessions_named, params=["handle"])

    with connection.cursor() as cursor:
        for handle in ("ann", "ben", "cy"):
            prepared.rows(cursor=cursor, handle=handle)
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        statements = [statement for (statement,) in cursor.fetchall()]

    assert any('FROM "mailbox_session"' in s and "$1" in s for s in statements), statements


def test_a_django_cursor_holds_the_connection_it_was_opened_on(db):
    # _connection_of relies on it (CursorWrapper.db), with and without query capture.
    with connection.cursor() as cursor:
        assert cursor.db is connections["default"]
    with CaptureQueriesContext(connection), connection.cursor() as cursor:
        assert cursor.db is connections["default"]
    assert _connection_of("default", None) is connections["default"]


def _json_columns(room_id):
    return (
        Message.objects.filter(room_id=room_id)
        .order_by("seq")
        .values_list("mentions", "send_report")
    )


def test_json_columns_read_as_the_orm_reads_them(sessions):
    room = room_create(sessions[0], slug="lab").room
    documents = [
        ([], {}),
        ([{"handle": "ann", "name": "Ann"}], {"unseen_before_send": 3, "a": [1.5, None, True]}),
        (["é \u2028"], {"big": 2**70, "a": 1, "b": 2}),  # past 64 bits: json's reading
    ]
    for seq, (mentions, report) in enumerate(documents, start=2):
        Message.objects.create(
            room=room, seq=seq, ordinal=seq, author=sessions[0].name, body="b",
            mentions=mentions, send_report=report,
        )  # fmt: skip

    rows = Prepared(_json_columns, params=["room_id"]).rows(room_id=room.pk)

    orm = [list(row) for row in _json_columns(room.pk)]
    assert [[repr(v) for v in row] for row in rows] == [[repr(v) for v in row] for row in orm]
    assert rows[2][1]["big"] == 2**70


def test_only_a_plain_json_columns_converter_is_replaced(db):
    plain = Message._meta.get_field("mentions")
    decoded = JSONField(decoder=json.JSONDecoder)
    decoded.set_attributes_from_name("decoded")

    class OwnField(JSONField):
        pass

    own = OwnField()
    own.set_attributes_from_name("own")

    faster = _faster(plain.from_db_value)
    assert faster is not plain.from_db_value
    assert _faster(decoded.from_db_value) == decoded.from_db_value
    assert _faster(own.from_db_value) == own.from_db_value
    assert _faster(connection.ops.convert_durationfield_value) == (
        connection.ops.convert_durationfield_value
    )
    # Django's answers where the text is not JSON or the value is not text.
    for value in ("not json", None, 5, b"[1]"):
        assert _answer(faster, value) == _answer(plain.from_db_value, value)


def _answer(convert, value):
    try:
        return repr(convert(value, None, connection))
    except TypeError as error:  # json.loads(5): Django's converter lets it through
        return str(error)


class _Text(str):
    """A str subclass: not written as it is (a subclass may convert)."""


def _write_values(model):
    """Values of several types for each field of ``model``: what a row may be written from."""
    yield "defaults", {}
    yield (
        "naive and aware datetimes",
        {
            f.attname: datetime(2026, 12, 3, 12, 0, 1) if i % 2 else datetime.now(UTC)  # noqa: DTZ001
            for i, f in enumerate(model._meta.concrete_fields)
            if isinstance(f, DateTimeField)
        },
    )
    yield (
        "text subclasses and empty containers",
        {
            f.attname: _Text("x") if isinstance(f, CharField) else []
            for f in model._meta.concrete_fields
            if isinstance(f, CharField | JSONField)
        },
    )
    yield "nulls", {f.attname: None for f in model._meta.concrete_fields if f.null}


@pytest.mark.parametrize("model", _MODELS, ids=[m._meta.label for m in _MODELS])
def test_a_rows_parameters_are_what_save_would_write(db, model, monkeypatch):
    """The compiled parameters of every model, from values of several types, field by field."""
    monkeypatch.setattr("django.utils.timezone.now", lambda: datetime(2026, 1, 2, tzinfo=UTC))
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    plan = PreparedInsert(model)
    plan.prepare()
    _, params_of = plan._compiled["default"]

    for _, values in _write_values(model):
        ours, theirs = model(), model()
        theirs.__dict__.update({k: v for k, v in ours.__dict__.items() if k != "_state"})
        for name, value in values.items():
            setattr(ours, name, value)
            setattr(theirs, name, value)
        with warnings.catch_warnings(record=True) as our_warnings:
            warnings.simplefilter("always")
            got = params_of(ours, connection)
        with warnings.catch_warnings(record=True) as their_warnings:
            warnings.simplefilter("always")
            expected = [f.get_db_prep_save(f.pre_save(theirs, True), connection) for f in fields]
        assert [_comparable(v) for v in got] == [_comparable(v) for v in expected]
        assert [str(w.message) for w in our_warnings] == [str(w.message) for w in their_warnings]
        assert ours.__dict__.keys() == theirs.__dict__.keys()  # pre_save set the same attributes


def _comparable(value):
    # PostgreSQL's JSON adapter wraps the value; what it wraps and how it dumps it is compared.
    if hasattr(value, "obj") and hasattr(value, "dumps"):
        return ("json", value.obj, value.dumps)
    return (type(value), value)


def test_a_column_whose_name_is_no_attribute_name_is_read_with_getattr():
    class Field:
        def get_db_prep_save(self, value, connection):
            return ("prepared", value)

        def pre_save(self, instance, add):
            return getattr(instance, "class")

    row = type("Row", (), {})()
    setattr(row, "class", 7)
    setattr(row, "not-a-name", "as it is")
    steps = [(Field(), "class", (), {}), (Field(), "not-a-name", (str,), {})]

    assert _compiled_params(steps)(row, None) == [("prepared", 7), "as it is"]


def test_a_part_reads_its_refs_from_their_parts_returning_in_their_places():
    sql = "INSERT INTO t (a, b, c) VALUES (%s, %s, %s), (%s, %s, %s)"

    written = _with_subqueries(sql, 6, ((1, "w0", "id"), (4, "w2", "pk")))

    assert written == (
        "INSERT INTO t (a, b, c) VALUES (%s, (SELECT id FROM w0), %s), "
        "(%s, (SELECT pk FROM w2), %s)"
    )
    with pytest.raises(ValueError, match="5 parameters for 6 placeholders"):
        _with_subqueries(sql, 5, ((1, "w0", "id"),))
