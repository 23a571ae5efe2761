from django.urls import re_path

from mailbox.api import views

# Trailing slashes are optional everywhere: agents type paths by hand, and a
# redirect would drop a POST body.
urlpatterns = [
    re_path(r"^sessions/?$", views.SessionStartApi.as_view(), name="session-start"),
    re_path(r"^sessions/current/?$", views.SessionCurrentApi.as_view(), name="session-current"),
]
