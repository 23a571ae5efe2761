"""The project page, with what only rooms know: rooms paused now, and the export.

``mailbox.admin.projects.ProjectAdmin`` holds the project's settings; it may
not import ``rooms``, so this subclass adds the rooms paused now to the use
of each cap and the export action (``rooms.selectors.export``, which reads
both halves), and takes the project's place in the admin.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, StreamingHttpResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.safestring import SafeString

from common import metrics
from mailbox.admin.projects import ProjectAdmin
from mailbox.models import Project
from rooms.models import Room
from rooms.selectors.export import export_lines

admin.site.unregister(Project)


@admin.register(Project)
class ProjectWithRoomsAdmin(ProjectAdmin):
    actions = ("export_projects",)

    def policy_lines(self, obj: Project) -> list[SafeString]:
        paused = Room.objects.filter(project=obj, paused_until__gt=timezone.now()).count()
        rooms_url = reverse("admin:rooms_room_changelist", current_app=self.admin_site.name)
        return [
            *super().policy_lines(obj),
            format_html(
                '<a href="{}?{}">Rooms paused now</a> (flood limit {} a minute): {}',
                rooms_url,
                urlencode({"project": obj.slug, "paused": "yes"}),
                obj.room_flood_limit or "none",
                paused,
            ),
        ]

    @admin.action(description="Export the selected project (JSON Lines)", permissions=["view"])
    def export_projects(
        self, request: HttpRequest, queryset: QuerySet[Project]
    ) -> StreamingHttpResponse | None:
        """The lines of ``plumb export``, streamed to the browser as they are read."""
        selected = list(queryset[:2])
        if len(selected) != 1:
            self.message_user(request, "Select one project to export.", messages.WARNING)
            return None
        project = selected[0]
        response = StreamingHttpResponse(
            export_lines(project), content_type="application/jsonl; charset=utf-8"
        )
        stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
        response["Content-Disposition"] = (
            f'attachment; filename="plumb-{project.slug}-{stamp}.jsonl"'
        )
        metrics.EXPORTS.inc()
        return response
