"""Named pause points, so that race tests can hold a transaction open at the critical moment.

A service calls ``pause_point("send.locked")`` where a race would bite (the
lock is held, the figures are read, nothing is committed yet). In
production nothing is registered and the call is one dictionary look-up.
A test registers a hook (``tests/races.py``) that blocks the thread that
reaches the point until a second connection has done its part, so a race
is reproduced every time instead of once in a thousand runs.
"""

from __future__ import annotations

from collections.abc import Callable

_hooks: dict[str, Callable[[], None]] = {}


def pause_point(name: str) -> None:
    """Run the hook registered for ``name``, if any (tests only)."""
    hook = _hooks.get(name)
    if hook is not None:
        hook()


def set_hook(name: str, hook: Callable[[], None] | None) -> None:
    """Register (or, with ``None``, remove) the hook for ``name``; for tests."""
    if hook is None:
        _hooks.pop(name, None)
    else:
        _hooks[name] = hook
