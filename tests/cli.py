"""Running the ``plumb`` command in-process, as the command-line tests do."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError


def plumb(*args: str) -> tuple[str, str]:
    """Run ``manage.py plumb ARGS`` in-process; return (stdout, stderr)."""
    out, err = StringIO(), StringIO()
    call_command("plumb", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def plumb_fails(*args: str) -> CommandError:
    """Run a command that must fail; return the CommandError Django would print to stderr."""
    with pytest.raises(CommandError) as info:
        plumb(*args)
    return info.value


def last_line(output: str) -> str:
    return output.rstrip("\n").split("\n")[-1]
