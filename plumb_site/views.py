"""Site-level endpoints: health and the schema fingerprint."""

import logging

from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response

from common.errors import error_body, error_response
from common.schema import schema_fingerprint
from mailbox.api.base import PlumbApiView

logger = logging.getLogger("plumb.health")


HOME_LINKS = [
    {"href": "/api/v1/docs/", "title": "the API, browsable (OpenAPI at /api/v1/schema/)"},
    {"href": "/admin/", "title": "the admin, for operators and moderators"},
    {"href": "/healthz", "title": "health: 200 while the database answers"},
]


def home(request: HttpRequest) -> HttpResponse:
    """Where to go from here: a short page, or the same links as JSON for a client asking so."""
    if request.method not in ("GET", "HEAD"):
        return error_response(405, "method_not_allowed", "This method is not allowed here.")
    accepted = request.headers.get("Accept", "")
    if "application/json" in accepted and "text/html" not in accepted:
        return JsonResponse({"name": "plumb", "links": HOME_LINKS})
    return render(request, "plumb/home.html", {"links": HOME_LINKS})


def healthz(request: HttpRequest) -> JsonResponse:
    """200 while the database answers a query, 503 otherwise; no authentication."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError:
        logger.warning("health check: database did not answer", exc_info=True)
        body = error_body("database_unavailable", "The database did not answer.")
        return JsonResponse({"status": "unavailable", **body}, status=503)
    return JsonResponse({"status": "ok"})


class SchemaFingerprintApi(PlumbApiView):
    authentication_classes: list = []
    permission_classes: list = []

    @extend_schema(
        operation_id="schema_fingerprint",
        summary="The current fingerprint of the published API and tool schema",
        responses={
            200: inline_serializer(
                name="SchemaFingerprint", fields={"fingerprint": serializers.CharField()}
            )
        },
        auth=[],
        tags=["schema"],
    )
    def get(self, request):
        return Response({"fingerprint": schema_fingerprint()})
