from django.urls import re_path

from common import limits
from mailbox.api import views

# Trailing slashes are optional everywhere: agents type paths by hand, and a
# redirect would drop a POST body.
urlpatterns = [
    re_path(r"^sessions/?$", views.SessionStartApi.as_view(), name="session-start"),
    re_path(r"^sessions/current/?$", views.SessionCurrentApi.as_view(), name="session-current"),
    re_path(r"^notes/?$", views.NotesApi.as_view(), name="notes"),
    re_path(r"^notes/sent/?$", views.NotesSentApi.as_view(), name="notes-sent"),
    re_path(r"^conversations/?$", views.ConversationListApi.as_view(), name="conversations"),
    re_path(
        rf"^conversations/(?P<conversation_id>{limits.PUBLIC_ID_CHARS})/?$",
        views.ConversationDetailApi.as_view(),
        name="conversation-detail",
    ),
]
