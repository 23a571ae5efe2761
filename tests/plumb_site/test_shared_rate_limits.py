"""Rate limits per process by default, shared across processes and hosts with REDIS_URL.

Two cache objects stand for two server processes: each has its own client
and connection pool, as each gunicorn worker on each host has. With
LocMemCache (no REDIS_URL) each counts alone; with Redis they count
together. A Redis that does not answer lets calls through (docs/operators.md,
Configuration), and says so once in the log.
"""

from __future__ import annotations

import logging
import socket
import uuid
from types import SimpleNamespace

import pytest
import redis
from django.core.cache.backends.locmem import LocMemCache
from django.core.exceptions import ImproperlyConfigured
from prometheus_client import REGISTRY
from rest_framework.exceptions import Throttled

from common import cache as shared_cache
from common.cache import FailOpenRedisCache
from mailbox.throttles import AuthFailureThrottle, SessionRateThrottle
from plumb_site.settings import cache_config
from tests.conftest import client_for

pytestmark = pytest.mark.django_db


def redis_process(url: str, prefix: str) -> FailOpenRedisCache:
    return FailOpenRedisCache(url, {"KEY_PREFIX": prefix})


def throttle_on(cache, throttle_class=SessionRateThrottle):
    throttle = throttle_class()
    throttle.cache = cache
    return throttle


def allowed_alternating(caches: list, session, calls: int) -> int:
    """Calls of one session, each through the next process in turn, that were let through."""
    request = SimpleNamespace(auth=session)
    return sum(
        throttle_on(caches[i % len(caches)]).allow_request(request, None) for i in range(calls)
    )


def dead_redis_url() -> str:
    """A loopback port nobody listens on (it was free a moment ago)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"


def cache_errors() -> float:
    return REGISTRY.get_sample_value("plumb_cache_errors_total") or 0.0


# --- counting across processes ----------------------------------------------------------


def test_with_redis_two_processes_count_one_sessions_calls_together(
    settings, redis_url, agent_session
):
    settings.PLUMB_RATE_SESSION = "5/m"
    prefix = f"t{uuid.uuid4().hex}"
    processes = [redis_process(redis_url, prefix), redis_process(redis_url, prefix)]

    assert allowed_alternating(processes, agent_session, 8) == 5


def test_without_redis_each_process_counts_alone(settings, agent_session):
    settings.PLUMB_RATE_SESSION = "5/m"
    processes = [LocMemCache("one", {}), LocMemCache("two", {})]

    assert allowed_alternating(processes, agent_session, 12) == 10


def test_deployments_with_different_prefixes_do_not_share_counts(
    settings, redis_url, agent_session
):
    settings.PLUMB_RATE_SESSION = "5/m"
    processes = [redis_process(redis_url, f"t{uuid.uuid4().hex}") for _ in range(2)]

    assert allowed_alternating(processes, agent_session, 12) == 10


def test_with_redis_failed_credentials_count_across_processes(settings, redis_url, rf):
    settings.PLUMB_RATE_AUTH_FAIL = "3/m"
    prefix = f"t{uuid.uuid4().hex}"
    here, there = (
        throttle_on(redis_process(redis_url, prefix), AuthFailureThrottle) for _ in range(2)
    )
    request = rf.get("/", REMOTE_ADDR="203.0.113.9")
    for throttle in (here, there, here):
        throttle.check(request)
        throttle.record(request)

    with pytest.raises(Throttled):
        there.check(request)


# --- Redis down ---------------------------------------------------------------------------


def test_the_api_answers_and_logs_once_when_redis_is_down(settings, agent_session, caplog):
    settings.PLUMB_RATE_SESSION = "2/m"
    settings.CACHES = {
        "default": {"BACKEND": "common.cache.FailOpenRedisCache", "LOCATION": dead_redis_url()}
    }
    client = client_for(agent_session)
    errors_before = cache_errors()

    with caplog.at_level(logging.WARNING, logger="plumb.cache"):
        statuses = [client.get("/api/v1/notes/").status_code for _ in range(4)]

    # Uncounted: past the 2/m rate, and never a 500.
    assert statuses == [200, 200, 200, 200]
    [warning] = [r for r in caplog.records if r.name == "plumb.cache"]
    assert "Redis did not answer" in warning.getMessage()
    # Per call: the address's failed credentials, the session's count read and written.
    assert cache_errors() - errors_before == 12


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_after_a_failure_redis_is_left_alone_for_a_while_then_used_again(
    monkeypatch, redis_url, caplog
):
    clock = Clock()
    monkeypatch.setattr(shared_cache, "time", clock)
    process = redis_process(redis_url, f"t{uuid.uuid4().hex}")
    process.set("k", [1.0])
    calls = []
    real_get = redis.Redis.get

    def outage(self, name):
        calls.append(name)
        raise redis.ConnectionError("Connection refused")

    monkeypatch.setattr(redis.Redis, "get", outage)
    with caplog.at_level(logging.WARNING, logger="plumb.cache"):
        assert process.get("k", []) == []
        clock.now += shared_cache.RETRY_AFTER - 0.1
        assert process.get("k", []) == []  # skipped: no second attempt
        assert len(calls) == 1
        clock.now += 0.2
        assert process.get("k", []) == []  # tried again, still down: no second warning
        assert len(calls) == 2
        monkeypatch.setattr(redis.Redis, "get", real_get)
        clock.now += shared_cache.RETRY_AFTER
        assert process.get("k", []) == [1.0]

    assert [r.getMessage().split(" (")[0].split(";")[0] for r in caplog.records] == [
        "Redis did not answer",
        "Redis answers again",
    ]


def test_other_cache_failures_are_not_hidden(redis_url):
    process = redis_process(redis_url, f"t{uuid.uuid4().hex}")

    with pytest.raises(ValueError, match="not found"):
        process.incr("missing")


# --- settings -----------------------------------------------------------------------------


def test_without_redis_url_the_cache_is_each_processs_memory(monkeypatch):
    monkeypatch.delenv("REDIS_URL", raising=False)

    assert cache_config() == {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379/0",
        "redis://:secret@cache.internal",
        "rediss://user:pw@cache.internal:6380/2",
        "unix:///run/redis/redis.sock",
    ],
)
def test_a_redis_url_shares_the_cache_under_a_key_prefix(monkeypatch, url):
    monkeypatch.setenv("REDIS_URL", url)
    monkeypatch.delenv("PLUMB_CACHE_PREFIX", raising=False)

    config = cache_config()

    assert config["BACKEND"] == "common.cache.FailOpenRedisCache"
    assert (config["LOCATION"], config["KEY_PREFIX"]) == (url, "plumb")


def test_the_key_prefix_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1/0")
    monkeypatch.setenv("PLUMB_CACHE_PREFIX", "plumb-staging")

    assert cache_config()["KEY_PREFIX"] == "plumb-staging"


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("REDIS_URL", "127.0.0.1:6379"),
        ("REDIS_URL", "http://cache.internal/0"),
        ("REDIS_URL", "redis:///0"),
        ("REDIS_URL", "redis://cache.internal:port/0"),
        ("REDIS_URL", "redis://cache.internal:6379/zero"),
        ("REDIS_URL", "unix://"),
        ("PLUMB_CACHE_PREFIX", "two words"),
        ("PLUMB_CACHE_PREFIX", "x" * 65),
    ],
)
def test_a_malformed_cache_setting_stops_the_server_naming_the_variable(monkeypatch, name, raw):
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1/0")
    monkeypatch.setenv(name, raw)

    with pytest.raises(ImproperlyConfigured, match=name):
        cache_config()


def test_a_malformed_redis_url_is_not_repeated_in_the_error_it_may_hold_a_password(monkeypatch):
    monkeypatch.setenv("REDIS_URL", "redis://:hunter2-secret@cache.internal:6379/zero")

    with pytest.raises(ImproperlyConfigured) as refused:
        cache_config()
    assert "hunter2" not in str(refused.value)
