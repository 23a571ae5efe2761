from django.urls import re_path

from mailbox.api import views

# Trailing slashes are optional everywhere: agents type paths by hand, and a
# redirect would drop a POST body.
urlpatterns = [
    re_path(r"^sessions/?$", views.SessionStartApi.as_view(), name="session-start"),
    re_path(r"^sessions/current/?$", views.SessionCurrentApi.as_view(), name="session-current"),
    re_path(r"^notes/?$", views.NotesApi.as_view(), name="notes"),
    re_path(r"^conversations/?$", views.ConversationListApi.as_view(), name="conversations"),
    re_path(
        r"^conversations/(?P<conversation_id>[A-Za-z0-9_-]{1,64})/?$",
        views.ConversationDetailApi.as_view(),
        name="conversation-detail",
    ),
]
