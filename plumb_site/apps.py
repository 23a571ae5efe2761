"""The admin app, configured with plumb's site (``plumb_site.admin.PlumbAdminSite``)."""

from django.contrib.admin.apps import AdminConfig


class PlumbAdminConfig(AdminConfig):
    default_site = "plumb_site.admin.PlumbAdminSite"
