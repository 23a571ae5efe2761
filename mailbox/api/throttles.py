"""Rate limits per session and per project key (PLUMB_RATE_SESSION, PLUMB_RATE_KEY).

Counters live in the default cache, which is per process: with N server
processes a client can reach up to N times the rate. That bounds a runaway
agent, which is the point; it is not a billing meter.
"""

from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle

from common import metrics
from mailbox.models import ProjectKey, Session


class _CredentialRateThrottle(SimpleRateThrottle):
    setting_name = ""
    credential_type: type = object

    def get_rate(self) -> str | None:
        # Read at call time so that settings overrides in tests take effect.
        return getattr(settings, self.setting_name)

    def get_cache_key(self, request, view) -> str | None:
        credential = request.auth
        if not isinstance(credential, self.credential_type):
            return None
        return f"throttle_{self.scope}_{credential.pk}"

    def throttle_failure(self) -> bool:
        # REST views and MCP tools both refuse through here (plumb_throttled_total).
        metrics.THROTTLED.labels(self.scope).inc()
        return super().throttle_failure()


class SessionRateThrottle(_CredentialRateThrottle):
    scope = "session"
    setting_name = "PLUMB_RATE_SESSION"
    credential_type = Session


class ProjectKeyRateThrottle(_CredentialRateThrottle):
    scope = "project_key"
    setting_name = "PLUMB_RATE_KEY"
    credential_type = ProjectKey
