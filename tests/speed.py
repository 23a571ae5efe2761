"""Speed checks on text passes that hold on a busy machine (issue #15).

Speed targets belong in ``bench/``; these few tests exist because one crafted
body once made a transcript page take minutes. Two kinds of check:

* ``best_time``: the least processor time of a few runs. Processor time, not
  wall-clock time: what is checked is the work the code does, and on a shared
  machine with more runnable processes than cores the wall clock runs two or
  three times faster than this process is given time. The least of a few
  runs leaves out a garbage collection or a cold cache.
* ``characters_through``: how many characters a text function was handed, a
  count of inner-loop work that no load can change. A pass is linear when
  doubling its input at most doubles the count (plus a constant).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import ModuleType

import pytest

RUNS = 3


def best_time(action: Callable[[], object], *, runs: int = RUNS) -> float:
    """The least processor time of ``runs`` calls of ``action``, in seconds."""
    times = []
    for _ in range(runs):
        start = time.process_time()
        action()
        times.append(time.process_time() - start)
    return min(times)


def characters_through(
    monkeypatch: pytest.MonkeyPatch,
    functions: list[tuple[ModuleType, str]],
    action: Callable[[], object],
) -> int:
    """Run ``action`` once; the characters it passed to each named module-level function."""
    count = 0

    def counted(original: Callable[..., object]) -> Callable[..., object]:
        def wrapper(text: str, *args: object, **kwargs: object) -> object:
            nonlocal count
            count += len(text)
            return original(text, *args, **kwargs)

        return wrapper

    with monkeypatch.context() as patch:
        for module, name in functions:
            patch.setattr(module, name, counted(getattr(module, name)))
        action()
    return count
