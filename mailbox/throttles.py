"""Rate limits: per session and per project key (PLUMB_RATE_SESSION, PLUMB_RATE_KEY), and
failed credentials per client address (PLUMB_RATE_AUTH_FAIL).

Counters live in the default cache. Without ``REDIS_URL`` that is each
process's memory: with N server processes a client can reach up to N times
the rate. With it, every process and host that shares the Redis counts
together. Either way a limit bounds a runaway agent, which is the point; it
is not a billing meter: counting is DRF's read-then-write of a list of
timestamps, so two calls at the same instant in two processes may count as
one, and when Redis does not answer the limits let calls through uncounted
rather than fail them (``common/cache.py``).
"""

from __future__ import annotations

import functools
import ipaddress
import threading
from types import SimpleNamespace

from django.conf import settings
from django.http import HttpRequest
from rest_framework import exceptions
from rest_framework.throttling import SimpleRateThrottle

from common import metrics, wake
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

    def allow_request(self, request, view) -> bool:
        # A parked call's later runs are the call it made, counted when it was
        # made: one woken three times counts once, as one that waits in its thread.
        if wake.resuming():
            return True
        return super().allow_request(request, view)

    def allow_credential(self, credential: Session | ProjectKey) -> bool:
        """``allow_request`` for a door without a DRF request: the same count."""
        return self.allow_request(SimpleNamespace(auth=credential), None)

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


# Two failures of one address in two threads of this process would both read
# the same history and the second write would drop the first one's entry, so
# a guesser with parallel requests would be counted once per batch. The lock
# makes every failure count among this process's threads. With the cache
# shared in Redis, two processes (or hosts) can still lose one to such a race,
# as DRF's throttles can: a guesser spreading a batch over N processes gains
# at most N - 1 extra tries per batch, where per-process caches gave N times
# the whole rate.
_record_lock = threading.Lock()


class AuthFailureThrottle(SimpleRateThrottle):
    """Failed credentials per client address: key guessing and token spraying.

    Unlike the throttles above it counts only failures, and it is consulted
    before a credential is looked up: ``check`` refuses every credential from
    an address that has reached the rate (a valid one too, or a guesser would
    learn which guess was right from a 200 among 429s), ``record`` counts one
    that matched nothing. Every door calls both: the REST and MCP bearer
    authentication (``mailbox.api.auth``), ``/metrics`` and the admin's login.
    The window slides as DRF's does, and ``Retry-After`` is DRF's ``wait()``:
    until the oldest failure that keeps the address at the rate leaves it.
    """

    scope = "auth_fail"

    def get_rate(self) -> str | None:
        return settings.PLUMB_RATE_AUTH_FAIL

    def get_cache_key(self, request: HttpRequest, view: object = None) -> str:
        return self.cache_format % {"scope": self.scope, "ident": client_address(request)}

    def check(self, request: HttpRequest) -> None:
        """Raise ``Throttled`` (``429 throttled``) while the address is at the rate.

        Not in a parked call's later runs: its credential was checked, and
        answered, when the call was made, so there is no guess left to refuse.
        """
        if self.rate is None or wake.resuming():
            return
        self._load(request)
        if len(self.history) >= self.num_requests:
            metrics.THROTTLED.labels(self.scope).inc()
            raise exceptions.Throttled(wait=self.wait())

    def record(self, request: HttpRequest) -> None:
        """Count one failed credential against the address."""
        if self.rate is None:
            return
        with _record_lock:
            self._load(request)
            self.history = [self.now, *self.history][: self.num_requests]
            self.cache.set(self.key, self.history, self.duration)

    def _load(self, request: HttpRequest) -> None:
        """The address's failures within the window, newest first (DRF's bookkeeping).

        At most as many as the rate allows: the newest of them decide when the
        address may try again, and DRF's ``wait()`` has no answer for more.
        """
        self.key = self.get_cache_key(request)
        self.now = self.timer()
        recent = [m for m in self.cache.get(self.key, []) if m > self.now - self.duration]
        self.history = recent[: self.num_requests]


def client_address(request: HttpRequest) -> str:
    """The address failures are counted against: ``REMOTE_ADDR``, an IPv6 client by its /64.

    Never ``X-Forwarded-For``: DRF's ``get_ident`` believes that header when
    no proxy count is configured, and a guesser would send a new one with each
    guess. One IPv6 host usually holds a whole /64, so its addresses count as
    one; an IPv4-mapped IPv6 address counts as the IPv4 address it maps.
    """
    return _counted_address(request.META.get("REMOTE_ADDR") or "")


@functools.lru_cache(maxsize=4096)
def _counted_address(raw: str) -> str:
    # Every authenticated call asks; parsing the address is about 3 µs of it,
    # and a server's clients are few addresses asking again and again.
    try:
        address = ipaddress.ip_address(raw)
    except ValueError:
        return raw
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)
