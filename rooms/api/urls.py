from django.urls import re_path

from common import limits
from rooms.api import views

SLUG = rf"(?P<slug>{limits.SLUG_CHARS})"
MESSAGE = rf"(?P<message_id>{limits.PUBLIC_ID_CHARS})"

urlpatterns = [
    re_path(r"^rooms/?$", views.RoomListApi.as_view(), name="rooms"),
    re_path(rf"^rooms/{SLUG}/?$", views.RoomDetailApi.as_view(), name="room-detail"),
    re_path(rf"^rooms/{SLUG}/join/?$", views.RoomJoinApi.as_view(), name="room-join"),
    re_path(rf"^rooms/{SLUG}/leave/?$", views.RoomLeaveApi.as_view(), name="room-leave"),
    re_path(rf"^rooms/{SLUG}/members/?$", views.MemberListApi.as_view(), name="room-members"),
    re_path(rf"^rooms/{SLUG}/messages/?$", views.MessagesApi.as_view(), name="room-messages"),
    re_path(rf"^rooms/{SLUG}/read/?$", views.ReadPositionApi.as_view(), name="room-read"),
    re_path(
        rf"^rooms/{SLUG}/messages/{MESSAGE}/?$",
        views.MessageDetailApi.as_view(),
        name="message-detail",
    ),
    re_path(
        rf"^rooms/{SLUG}/messages/{MESSAGE}/reviews/?$",
        views.ReviewApi.as_view(),
        name="message-reviews",
    ),
    re_path(r"^mentions/?$", views.MentionListApi.as_view(), name="mentions"),
    re_path(r"^activity/?$", views.ActivityApi.as_view(), name="activity"),
    re_path(r"^search/?$", views.SearchApi.as_view(), name="search"),
]
