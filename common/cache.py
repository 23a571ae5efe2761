"""The shared cache (``REDIS_URL``): Django's Redis backend, failing open.

plumb keeps only rate-limit counters in the cache (``mailbox/throttles.py``).
Shared in Redis, they count a client's calls across every process and host;
but a limit exists to bound a runaway agent, and an outage of the store that
counts must not take the API down with it. So a call that Redis does not
answer (refused, timed out, an error reply) behaves as a cache without that
key: a read finds nothing, a write is dropped, and the rate limit lets the
request through uncounted. The API keeps answering; only the limits pause.

After a failure the process leaves Redis alone for ``RETRY_AFTER`` seconds:
with a host that is gone (no refusal, just silence) every call would
otherwise wait for the connect timeout, twice per request. One warning is
logged when the process stops using Redis and one when it is back, and
``plumb_cache_errors_total`` counts the calls that failed or were skipped.

Every other failure (a bad key, a value that does not pickle) still raises:
those are bugs, not outages. So do ``incr`` and ``clear``, which plumb does
not call (the tests' ``cache.clear()`` should fail loudly).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis
from django.core.cache.backends.base import DEFAULT_TIMEOUT
from django.core.cache.backends.redis import RedisCache

from common import metrics

logger = logging.getLogger("plumb.cache")

RETRY_AFTER = 5.0  # seconds without Redis after a failure, per process

T = TypeVar("T")


class FailOpenRedisCache(RedisCache):
    """``django.core.cache.backends.redis.RedisCache`` that treats an outage as a miss."""

    def __init__(self, server: str, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._lock = threading.Lock()
        self._down_until = 0.0  # time.monotonic() before which Redis is not asked

    def _attempt(self, call: Callable[[], T], fallback: T) -> T:
        if time.monotonic() < self._down_until:
            metrics.CACHE_ERRORS.inc()
            return fallback
        try:
            result = call()
        except redis.RedisError as exc:
            metrics.CACHE_ERRORS.inc()
            with self._lock:
                first = self._down_until == 0.0
                self._down_until = time.monotonic() + RETRY_AFTER
            if first:
                logger.warning(
                    "Redis did not answer (%s: %s); rate limits let calls through uncounted "
                    "until it does (retrying every %g s)",
                    type(exc).__name__,
                    exc,
                    RETRY_AFTER,
                )
            return fallback
        if self._down_until:
            with self._lock:
                back = self._down_until != 0.0
                self._down_until = 0.0
            if back:
                logger.warning("Redis answers again; rate limits count again")
        return result

    def get(self, key: str, default: Any = None, version: int | None = None) -> Any:
        base = super()
        return self._attempt(lambda: base.get(key, default, version), default)

    def get_many(self, keys: Any, version: int | None = None) -> dict[str, Any]:
        base = super()
        return self._attempt(lambda: base.get_many(keys, version), {})

    def has_key(self, key: str, version: int | None = None) -> bool:
        base = super()
        return self._attempt(lambda: base.has_key(key, version), False)

    def add(
        self, key: str, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None
    ) -> bool:
        base = super()
        return self._attempt(lambda: base.add(key, value, timeout, version), False)

    def set(
        self, key: str, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None
    ) -> None:
        base = super()
        self._attempt(lambda: base.set(key, value, timeout, version), None)

    def set_many(
        self, data: dict[str, Any], timeout: Any = DEFAULT_TIMEOUT, version: int | None = None
    ) -> list[str]:
        base = super()
        return self._attempt(lambda: base.set_many(data, timeout, version), list(data))

    def touch(self, key: str, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None) -> bool:
        base = super()
        return self._attempt(lambda: base.touch(key, timeout, version), False)

    def delete(self, key: str, version: int | None = None) -> bool:
        base = super()
        return self._attempt(lambda: base.delete(key, version), False)

    def delete_many(self, keys: Any, version: int | None = None) -> None:
        base = super()
        self._attempt(lambda: base.delete_many(keys, version), None)
