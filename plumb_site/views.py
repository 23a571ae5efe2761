"""Site-level endpoints: health, metrics and the schema fingerprint."""

import hmac
import logging
import os
from collections.abc import Iterator

from django.conf import settings
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_safe
from drf_spectacular.utils import extend_schema, inline_serializer
from prometheus_client import REGISTRY
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from rest_framework import serializers
from rest_framework.exceptions import Throttled
from rest_framework.response import Response

from common.errors import error_body, error_response, plain_error_response
from common.schema import schema_fingerprint
from mailbox.api.base import PlumbApiView
from mailbox.selectors import notes_pending_count
from mailbox.throttles import AuthFailureThrottle

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


@csrf_exempt  # no cookie is read here, and only GET and HEAD are answered
@require_safe
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


@csrf_exempt  # no cookie is read here, and only GET and HEAD are answered
@require_safe
def metrics(request: HttpRequest) -> HttpResponse:
    """The Prometheus exposition of ``common.metrics``, plus what is computed now.

    A plain Django view, not an API view: it is for monitoring, outside the
    agents' API, its OpenAPI document and its rate limits. When
    ``PLUMB_METRICS_TOKEN`` is set it must come as the bearer token;
    otherwise anyone who can reach the server may read the figures (no
    names, no content: counts and timings). A wrong token counts against the
    client's address like a wrong API credential (``PLUMB_RATE_AUTH_FAIL``).
    """
    expected = settings.PLUMB_METRICS_TOKEN
    if expected is not None:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        given = given.strip()
        if scheme.lower() != "bearer" or not given:
            return _metrics_refusal("not_authenticated", "Send the metrics token as a bearer.")
        failures = AuthFailureThrottle()
        try:
            failures.check(request)
        except Throttled as refusal:
            return plain_error_response(refusal)
        if not hmac.compare_digest(given.encode(), expected.encode()):
            failures.record(request)
            return _metrics_refusal("invalid_token", "This is not the metrics token.")
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encoder(_Scrape()), content_type=content_type)


def _metrics_refusal(code: str, message: str) -> HttpResponse:
    response = error_response(401, code, message)
    response["WWW-Authenticate"] = 'Bearer realm="plumb metrics"'
    return response


class _Scrape:
    """One scrape: the values every process counted, then the gauges read now."""

    def collect(self) -> Iterator[Metric]:
        folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        # Under gunicorn each process counts into its own file; this process
        # answers for all of them by summing every file (counters of workers
        # that have exited included, gauges only of live ones).
        counted = MultiProcessCollector(None, path=folder) if folder else REGISTRY
        yield from counted.collect()
        pending = notes_pending_count()
        yield GaugeMetricFamily("plumb_notes_pending", "Notes not yet delivered.", value=pending)


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
