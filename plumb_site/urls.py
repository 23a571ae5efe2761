from django.contrib import admin
from django.urls import include, path, re_path
from django.views.generic import RedirectView
from drf_spectacular.renderers import OpenApiJsonRenderer
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from plumb_site import views

api_patterns = [
    path("", include("mailbox.api.urls")),
    path("", include("rooms.api.urls")),
    re_path(
        r"^schema/?$",
        SpectacularAPIView.as_view(renderer_classes=[OpenApiJsonRenderer]),
        name="schema",
    ),
    re_path(
        r"^schema/fingerprint/?$",
        views.SchemaFingerprintApi.as_view(),
        name="schema-fingerprint",
    ),
    re_path(r"^docs/?$", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
]

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("metrics", views.metrics, name="metrics"),
    path("mcp", include("plumb_site.mcp.urls")),
    path("api/v1/", include(api_patterns)),
    # APPEND_SLASH is off (its redirect would drop a POST body); this address people type.
    path(
        "admin",
        RedirectView.as_view(pattern_name="admin:index", permanent=True, query_string=True),
        name="admin-slash",
    ),
    path("admin/", admin.site.urls),
]
