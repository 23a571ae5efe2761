"""Django's settings read as a plain attribute, without a Python call each time.

``django.conf.settings`` keeps each setting it has read in its own
``__dict__``, but every read still runs ``LazyObject.__getattribute__`` in
Python first: it asks Python's own look-up, then checks the value for the
mark of one of ``LazyObject``'s proxy methods. A send reads some thirty
settings through Django, DRF and plumb: 615 of its bytecodes, the costliest
single function of a served send outside the service.

``install`` gives ``LazySettings`` (the class of that one object) Python's
own attribute look-up, in C. A setting read once is found in ``__dict__``;
any other goes to ``LazySettings.__getattr__``, which reads it from the
wrapped settings and keeps it; ``override_settings`` (a new wrapped object)
empties what is kept, and setting or deleting one setting drops it
(``LazySettings.__setattr__``, ``__delattr__``). What differs from Django's
look-up: an attribute look-up of one of ``LazyObject``'s own proxy methods
(``__getitem__``, ``__iter__`` and the like, which a settings object does
not have) finds the proxy rather than failing; implicit look-ups (``len()``,
``in``) skip ``__getattribute__`` either way, and plumb asks for none of
them. Where Django gives ``LazySettings`` a look-up of its own, or
``LazyObject`` a different one, ``install`` leaves them be.
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
