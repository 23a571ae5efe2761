"""Django's settings read with Python's own look-up, as Django's reads them
(plumb_site/lazy.py)."""

from __future__ import annotations

import pytest
from django.conf import LazySettings, settings
from django.test import override_settings

MISSING = object()


def read_all() -> dict[str, object]:
    """Every setting, read afresh through ``settings``."""
    for name in [n for n in vars(settings) if n != "_wrapped"]:
        vars(settings).pop(name)  # forget what was kept
    return {
        name: getattr(settings, name, MISSING) for name in dir(settings._wrapped) if name.isupper()
    }


def test_settings_are_read_with_pythons_own_look_up():
    assert LazySettings.__dict__["__getattribute__"] is object.__getattribute__


def test_every_setting_reads_as_djangos_look_up_reads_it(monkeypatch):
    ours = read_all()
    with monkeypatch.context() as django:
        django.delattr(LazySettings, "__getattribute__")
        assert "__getattribute__" not in LazySettings.__dict__
        djangos = read_all()

    assert len(ours) > 100
    assert ours == djangos
    assert djangos["STATIC_URL"] == settings.STATIC_URL


def test_an_override_and_its_end_are_seen_at_once():
    before = settings.PLUMB_ROOM_FLOOD_LIMIT

    with override_settings(PLUMB_ROOM_FLOOD_LIMIT=before + 7, PLUMB_NEW_ONE="x"):
        assert before + 7 == settings.PLUMB_ROOM_FLOOD_LIMIT
        assert settings.PLUMB_NEW_ONE == "x"

    assert before == settings.PLUMB_ROOM_FLOOD_LIMIT
    assert not hasattr(settings, "PLUMB_NEW_ONE")


def test_a_setting_set_and_deleted_is_seen_at_once(settings):
    settings.PLUMB_ROOM_FLOOD_LIMIT = 3
    assert settings.PLUMB_ROOM_FLOOD_LIMIT == 3

    del settings.PLUMB_ROOM_FLOOD_LIMIT
    with pytest.raises(AttributeError):
        settings.PLUMB_ROOM_FLOOD_LIMIT  # noqa: B018


def test_a_setting_that_does_not_exist_is_an_attribute_error():
    with pytest.raises(AttributeError):
        settings.PLUMB_NEVER_SET  # noqa: B018
    assert settings.configured
