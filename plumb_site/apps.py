"""The roof's app configurations: the admin with plumb's site, and the roof itself."""

from django.apps import AppConfig
from django.contrib.admin.apps import AdminConfig


class PlumbAdminConfig(AdminConfig):
    default_site = "plumb_site.admin.PlumbAdminSite"


class PlumbSiteConfig(AppConfig):
    """The roof as an app, without models: Django finds the ``plumb`` command in it."""

    name = "plumb_site"
    label = "plumb_site"

    def ready(self) -> None:
        # Registers the system checks (SQLite's FTS5 for the search index).
        from plumb_site import (
            checks,  # noqa: F401
            connections,
            headers,
            lazy,
            pgtimes,
        )

        # Django's connection, and a response's missing headers, looked up
        # without an exception each time.
        connections.install()
        headers.install()
        # Django's settings read without a Python call each time.
        lazy.install()
        # PostgreSQL's timestamps read in C.
        pgtimes.install()
