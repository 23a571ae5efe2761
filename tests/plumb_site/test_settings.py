"""Settings read at start: LOG_FORMAT, PLUMB_METRICS_TOKEN and the connection bounds
(docs/operators.md, Configuration).

Each case starts a Python process of its own: settings are read once, at
start, and a malformed value must stop that start with a message naming the
variable.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

# Configure Django from the environment, then log one warning through the root logger.
LOG_ONE_LINE = (
    "import django, logging; django.setup(); "
    "logging.getLogger('plumb.check').warning('hello %s', 'there')"
)


def start(tmp_path: Path, code: str, **env: str) -> subprocess.CompletedProcess:
    environment = {
        k: v for k, v in os.environ.items() if not k.startswith(("PLUMB_", "LOG_", "PROMETHEUS"))
    }
    environment.update(
        DJANGO_SETTINGS_MODULE="plumb_site.settings", PLUMB_VAR_DIR=str(tmp_path), **env
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=settings.BASE_DIR,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_log_format_json_makes_each_log_line_a_json_object(tmp_path):
    done = start(tmp_path, LOG_ONE_LINE, LOG_FORMAT="json")

    assert done.returncode == 0, done.stderr
    [line] = done.stderr.splitlines()
    entry = json.loads(line)
    assert (entry["level"], entry["logger"], entry["message"]) == (
        "WARNING",
        "plumb.check",
        "hello there",
    )


def test_the_plain_log_format_is_the_default(tmp_path):
    done = start(tmp_path, LOG_ONE_LINE)

    assert done.returncode == 0, done.stderr
    assert done.stderr.rstrip().endswith("WARNING plumb.check hello there")


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("LOG_FORMAT", "yaml"),
        ("PLUMB_METRICS_TOKEN", "short"),
        ("PLUMB_METRICS_TOKEN", "has a space in it, 16+"),
        ("PLUMB_METRICS_TOKEN", "non-ascii-token-é-0123"),
        ("PLUMB_HEADER_TIMEOUT", "10s"),
        ("PLUMB_HEADER_TIMEOUT", "0"),
        ("PLUMB_MAX_CONNECTIONS", "lots"),
        ("PLUMB_MAX_CONNECTIONS", "0"),
    ],
)
def test_a_malformed_value_stops_the_start_naming_the_variable(tmp_path, variable, value):
    done = start(tmp_path, "import django; django.setup()", **{variable: value})

    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr
    assert variable in done.stderr.splitlines()[-1]


def test_a_misconfigured_command_says_so_in_one_line(tmp_path):
    """``make serve`` starts with ``manage.py``: a bad setting is one line, no traceback."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("PLUMB_", "LOG_"))}
    done = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=settings.BASE_DIR,
        env={**environment, "PLUMB_VAR_DIR": str(tmp_path), "LOG_FORMAT": "xml"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode != 0
    assert done.stderr.splitlines() == ["plumb: LOG_FORMAT must be one of plain, json, got 'xml'."]


def test_a_misconfigured_server_says_so_in_one_line_before_any_worker(tmp_path):
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("PLUMB_", "LOG_"))}
    gunicorn = Path(sys.executable).with_name("gunicorn")
    done = subprocess.run(
        [str(gunicorn), "--config", "python:plumb_site.gunicorn_config", "--check-config"],
        cwd=settings.BASE_DIR,
        env={**environment, "PLUMB_VAR_DIR": str(tmp_path), "PLUMB_MAX_CONNECTIONS": "lots"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1].startswith("plumb: PLUMB_MAX_CONNECTIONS")
    assert "Traceback" not in done.stderr
