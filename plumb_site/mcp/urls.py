"""Included at ``mcp`` by the site URLs; the slash is optional, as everywhere in plumb."""

from django.urls import re_path

from plumb_site.mcp import views

urlpatterns = [re_path(r"^/?$", views.endpoint, name="mcp")]
