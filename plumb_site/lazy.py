"""Django's settings read as a plain attribute, without a Python call each time.

``django.conf.settings`` keeps each setting it has read in its own
``__dict__``, but every read still runs ``LazyObject.__getattribute__`` in
Python first: it asks Python's own look-up, then checks the value for the
mark of one of ``LazyObject``'s proxy methods. A send reads some thirty
settings through Django, DRF and plumb: 615 of its bytecodes, the costliest
single function of a served send outside the service.

``install`` gives ``LazySettings`` (the class of that one object) Python's
own attribute look-up, in C: a setting read before is found in
``__dict__``, and any other goes to ``LazySettings.__getattr__``, which
reads it from the wrapped settings and keeps it, as before;
``override_settings`` and setting an attribute empty that store as before
(``LazySettings.__setattr__``). Only ``LazyObject``'s own proxy methods
(``__getitem__``, ``__iter__`` and the like, which a settings object does
not have) are no longer hidden from an attribute look-up; implicit look-ups
(``len()``, ``in``) never went through ``__getattribute__``, and plumb asks
for none of them. Where a later Django gives ``LazySettings`` a look-up of
its own, or changes ``LazyObject``'s, it keeps them (``install``).
``tests/plumb_site/test_lazy.py`` reads every setting both ways.
"""

from __future__ import annotations

from django.conf import LazySettings
from django.utils.functional import LazyObject

# The look-up this replaces: Django 5's, which checks for a masked proxy method.
_DJANGOS = "_mask_wrapped"


def install() -> None:
    """Give ``LazySettings`` Python's own attribute look-up, where it has Django's."""
    djangos = LazyObject.__dict__.get("__getattribute__")
    if (
        "__getattribute__" not in LazySettings.__dict__
        and djangos is not None
        and _DJANGOS in djangos.__code__.co_consts
    ):
        LazySettings.__getattribute__ = object.__getattribute__
