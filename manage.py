#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "plumb_site.settings")
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        settings.INSTALLED_APPS  # noqa: B018 - read the settings now, before any command
    except ImproperlyConfigured as exc:
        # A misconfiguration is the operator's to fix: one line naming the
        # variable and what it accepts, not a traceback.
        sys.exit(f"plumb: {exc}")
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
