"""Each domain error declares the keys of its ``details`` (``PlumbError.data_fields``).

A client branches on an error's code and reads its details; every raise of
one class carries the same keys, so a raise that forgets one, or adds one,
fails where it is written rather than in a client.
"""

from __future__ import annotations

import pytest

from common.errors import BodyTooLarge, PlumbError, StoredBodyTooLarge, ValidationFailed
from common.schema import error_responses
from mailbox.errors import ConversationExhausted, CrossProjectRefused, NameInUse
from rooms.errors import RoomCrossProjectRefused


def test_an_error_carries_exactly_the_details_its_class_declares():
    error = ConversationExhausted(cap=3, conversation_id="cnv_x")

    assert error.as_dict()["error"] == {
        "code": "conversation_exhausted",
        "message": ConversationExhausted.message,
        "details": {"cap": 3, "conversation_id": "cnv_x"},
    }


@pytest.mark.parametrize(
    "data", [{}, {"cap": 3}, {"cap": 3, "conversation_id": "c", "extra": 1}], ids=str
)
def test_a_raise_with_other_details_fails_where_it_is_written(data):
    with pytest.raises(TypeError, match="ConversationExhausted carries"):
        ConversationExhausted(**data)


def test_an_error_without_declared_details_takes_none():
    assert NameInUse().details == {}
    with pytest.raises(TypeError):
        NameInUse(handle="x")


def test_one_code_two_shapes_are_two_classes():
    notes = CrossProjectRefused(recipient_project="q", your_project="p")
    rooms = RoomCrossProjectRefused(room_project="q", your_project="p")

    assert notes.code == rooms.code == "cross_project_refused"
    assert set(notes.details) != set(rooms.details)
    assert isinstance(rooms, CrossProjectRefused)


def test_a_field_error_names_its_field_and_problem():
    error = ValidationFailed.field("seq", "From 0 to 4.")

    assert error.message == "seq: From 0 to 4."
    assert error.details == {"seq": ["From 0 to 4."]}
    assert ValidationFailed.field("to", "Invalid.", "to must be a name.").message == (
        "to must be a name."
    )


def test_the_openapi_document_lists_each_codes_details():
    described = error_responses(BodyTooLarge, StoredBodyTooLarge, NameInUse)

    assert described[413].description == (
        "Error codes: body_too_large (details: body, size), "
        "body_too_large (details: body, stored_bytes)"
    )
    assert described[409].description == "Error codes: name_in_use"


def test_every_domain_error_declares_its_details_as_a_tuple_of_names():
    classes, seen = [PlumbError], []
    while classes:
        cls = classes.pop()
        seen.append(cls)
        classes.extend(cls.__subclasses__())

    for cls in seen:
        assert isinstance(cls.data_fields, tuple), cls
        assert all(isinstance(name, str) for name in cls.data_fields), cls
