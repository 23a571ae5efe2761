"""plumb settings: one module, every deploy-time value from the environment.

Each variable is named like the setting it fills. A malformed value stops the
process at start with a message naming the variable, rather than surfacing as
a confusing failure on the first request.
"""

import os
import re
import secrets
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from common.limits import PUBLIC_URL_MESSAGE, PUBLIC_URL_PATTERN, TIMESTAMP_FORMAT

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("PLUMB_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be one of true/false/1/0/yes/no/on/off, got {raw!r}.")


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}.") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {value}.")
    return value


def env_rate(name: str, default: str) -> str | None:
    """A DRF rate string such as ``100/s``, or ``off`` to disable the limit."""
    raw = os.environ.get(name, default).strip()
    if raw.lower() == "off":
        return None
    count, _, period = raw.partition("/")
    if not count.isdigit() or int(count) < 1 or not period or period[0] not in "smhd":
        raise ImproperlyConfigured(
            f"{name} must be a rate such as '100/s', '600/m' or 'off', got {raw!r}."
        )
    return raw


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}, got {raw!r}.")
    return value


def metrics_token() -> str | None:
    """PLUMB_METRICS_TOKEN: the bearer token GET /metrics asks for; unset, it is open."""
    raw = os.environ.get("PLUMB_METRICS_TOKEN", "")
    if raw == "":
        return None
    if len(raw) < 16 or not raw.isascii() or not raw.isprintable() or " " in raw:
        raise ImproperlyConfigured(
            "PLUMB_METRICS_TOKEN must be at least 16 printable ASCII characters without spaces."
        )
    return raw


def env_url(name: str) -> str:
    """An absolute http(s) URL without its trailing slash, or "" when unset."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return ""
    url = raw.rstrip("/")
    if re.match(PUBLIC_URL_PATTERN, url) is None:
        raise ImproperlyConfigured(f"{name}: {PUBLIC_URL_MESSAGE} Got {raw!r}.")
    return url


def secret_key() -> str:
    """Use SECRET_KEY when set; otherwise generate one into var/ so local runs are stable."""
    configured = os.environ.get("SECRET_KEY")
    if configured:
        return configured
    path = VAR_DIR / "secret_key"
    if not path.exists():
        # O_EXCL: two processes starting at once must not each write their own key.
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_urlsafe(50))
    return path.read_text().strip()


SECRET_KEY = secret_key()
DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = [
    host.strip()
    for host in os.environ.get("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver").split(",")
    if host.strip()
]
CSRF_TRUSTED_ORIGINS = [
    origin.strip()
    for origin in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",")
    if origin.strip()
]

INSTALLED_APPS = [
    # django.contrib.admin, with plumb's site: the home page shows the system at a glance.
    "plumb_site.apps.PlumbAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "mailbox",
    "rooms",
    # The roof's own doors that Django discovers: the `plumb` management command.
    "plumb_site.apps.PlumbSiteConfig",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Below WhiteNoise, so static files are not counted as requests.
    "plumb_site.middleware.RequestMetricsMiddleware",
    "plumb_site.middleware.ApiErrorMiddleware",
    # Django's own, skipped on the API's paths (plumb_site/middleware.py: _BrowserOnly).
    "plumb_site.middleware.SessionMiddleware",
    "plumb_site.middleware.CommonMiddleware",
    "plumb_site.middleware.CsrfViewMiddleware",
    "plumb_site.middleware.AuthenticationMiddleware",
    "plumb_site.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "plumb_site.urls"
# Paths accept an optional trailing slash themselves; a redirect would drop a POST body.
APPEND_SLASH = False
WSGI_APPLICATION = "plumb_site.wsgi.application"
ASGI_APPLICATION = "plumb_site.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


def database_config() -> dict:
    url = os.environ.get("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'plumb.sqlite3'}"
    try:
        config = dj_database_url.parse(url, conn_max_age=0)
    except Exception as exc:  # dj-database-url raises several types for bad URLs
        raise ImproperlyConfigured(f"DATABASE_URL is not a usable database URL: {exc}") from None
    if config["ENGINE"] == "django.db.backends.sqlite3":
        config["ENGINE"] = "plumb_site.sqlite"  # writers queue before taking the lock
        config["OPTIONS"] = {
            # IMMEDIATE takes the write lock when a transaction starts. With the
            # default DEFERRED, two read-then-write transactions both read, then
            # one fails its upgrade with "database is locked" instead of waiting.
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
            # WAL lets readers run alongside the one writer; NORMAL sync is
            # durable across process crashes (only an OS crash can lose the
            # last commits), which is the failure plumb's tests exercise.
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
        # Tests need a real file: several threads and server processes share it.
        # One per test process, so that concurrent runs do not trample each other.
        config["TEST"] = {"NAME": str(VAR_DIR / f"test-{os.getpid()}.sqlite3")}
    elif config["ENGINE"] == "django.db.backends.postgresql":
        # Django's, checking a kept connection without a round trip when it can
        # (plumb_site/postgresql/__init__.py).
        config["ENGINE"] = "plumb_site.postgresql"
        config["CONN_HEALTH_CHECKS"] = True
        # Parameters travel apart from the SQL, and psycopg prepares a
        # statement the second time a connection runs it (Django turns
        # preparing off unless told: psycopg's prepare_threshold), so that
        # PostgreSQL plans every request's statements once per connection
        # rather than per call: planning costs it more than running them.
        config["OPTIONS"] = {"server_side_binding": True, "prepare_threshold": 1}
    # Each server thread keeps its connection between requests. Opening one
    # costs a TCP and auth round trip on PostgreSQL and, on SQLite, the PRAGMAs
    # and Django's SQL functions: more than a whole cheap request.
    config["CONN_MAX_AGE"] = env_int("CONN_MAX_AGE", 60)
    return config


DATABASES = {"default": database_config()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# Request bodies: a note or message is at most 16 KiB of text; JSON escaping can
# multiply that by six, so 256 KiB leaves room without inviting abuse.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("PLUMB_MAX_REQUEST_BYTES", 256 * 1024, minimum=1024)

# The server (plumb_site/asgi.py): threads per process that run Django code,
# and how long a client may take to send a request body (408 past it).
PLUMB_THREADS = env_int("PLUMB_THREADS", 8, minimum=2)
PLUMB_BODY_TIMEOUT = env_int("PLUMB_BODY_TIMEOUT", 10, minimum=1)
# Long-polls (notes, room reads, activity) that one process holds at once; each
# holds one of its threads, so half of them at most, and the rest always answer
# other calls. Past it a poll answers at once with what it has (mailbox/wakeups.py).
PLUMB_WAITING_POLLS = env_int("PLUMB_WAITING_POLLS", PLUMB_THREADS // 2, minimum=1)
# Waiting calls that one process holds on its event loop, where a waiting call
# holds no thread (plumb_site/asgi.py); past it they wait in threads, as above.
PLUMB_PARKED_POLLS = env_int("PLUMB_PARKED_POLLS", 1000, minimum=0)
# Connections (plumb_site/asgi_worker.py): a connection must send a complete
# request head within PLUMB_HEADER_TIMEOUT seconds of opening (of the first
# byte of its next request, once kept alive), and one process holds at most
# PLUMB_MAX_CONNECTIONS. Parked calls each hold one: room for every one of
# them, and as many again of other clients.
PLUMB_HEADER_TIMEOUT = env_int("PLUMB_HEADER_TIMEOUT", 10, minimum=1)
PLUMB_MAX_CONNECTIONS = env_int("PLUMB_MAX_CONNECTIONS", 2 * PLUMB_PARKED_POLLS + 200, minimum=1)

PLUMB_SESSION_TTL = env_int("PLUMB_SESSION_TTL", 300, minimum=1)
# Requests of one server process that run at once (0: as many as threads).
# One on SQLite, where a second one only fights the first for the interpreter
# lock; see common/gate.py.
PLUMB_ACTIVE_REQUESTS = env_int(
    "PLUMB_ACTIVE_REQUESTS", 1 if DATABASES["default"]["ENGINE"] == "plumb_site.sqlite" else 0
)
# last_seen_at is refreshed at most this often per session, so that a busy
# agent does not turn every read into a write.
PLUMB_SEEN_WRITE_INTERVAL = env_int("PLUMB_SEEN_WRITE_INTERVAL", 5, minimum=0)
# A new project's room_flood_limit (SPEC §8; each project's own is set in the
# admin or with `plumb project set`). 120 is far above a busy conversation
# between agents and people (a message every half second, all minute long), far
# below two agents answering each other as fast as they can. 0: no limit.
PLUMB_ROOM_FLOOD_LIMIT = env_int("PLUMB_ROOM_FLOOD_LIMIT", 120)
PLUMB_RATE_SESSION = env_rate("PLUMB_RATE_SESSION", "100/s")
PLUMB_RATE_KEY = env_rate("PLUMB_RATE_KEY", "10/s")
# Failed credentials per client address (REMOTE_ADDR): key guessing and token
# spraying; see mailbox/throttles.py.
PLUMB_RATE_AUTH_FAIL = env_rate("PLUMB_RATE_AUTH_FAIL", "20/m")
# Where agents reach this server, as `plumb connect` prints it into MCP client
# configurations; empty: http://HOST:PORT, where `make serve` listens.
PLUMB_PUBLIC_URL = env_url("PLUMB_PUBLIC_URL")

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["mailbox.api.auth.SessionTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["mailbox.api.auth.IsAgentSession"],
    "DEFAULT_RENDERER_CLASSES": ["common.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["common.parsers.StrictJSONParser"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "common.negotiation.JSONOnlyNegotiation",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_THROTTLE_CLASSES": [],
    "DEFAULT_THROTTLE_RATES": {"session": PLUMB_RATE_SESSION, "project_key": PLUMB_RATE_KEY},
    "EXCEPTION_HANDLER": "common.errors.exception_handler",
    # No OPTIONS metadata: it is undocumented, so it answers 405 like any other.
    "DEFAULT_METADATA_CLASS": None,
    "UNAUTHENTICATED_USER": None,
    "DATETIME_FORMAT": TIMESTAMP_FORMAT,
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}

# Documents that the schema fingerprint covers besides the OpenAPI schema
# (common/schema.py); named here so that the floor never imports the roof.
PLUMB_PUBLISHED_SCHEMAS = {"mcp_tools": "plumb_site.mcp.schemas.TOOLS"}

SPECTACULAR_SETTINGS = {
    "TITLE": "plumb API",
    "DESCRIPTION": (
        "Coordination server for AI agents: a mailbox of private notes between agent "
        "sessions and shared, ordered chat rooms."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "common.schema.add_error_responses",
    ],
    # Fields named "kind": who wrote something (from, author) and an event's kind.
    "ENUM_NAME_OVERRIDES": {"AuthorKindEnum": "mailbox.models.AuthorKind"},
    "APPEND_COMPONENTS": {
        "securitySchemes": {
            "sessionToken": {"type": "http", "scheme": "bearer", "description": "Session token"},
            "projectKey": {"type": "http", "scheme": "bearer", "description": "Project key"},
        }
    },
}

# GET /metrics (common/metrics.py). Open when no token is set: bind plumb to
# loopback or set one. Several gunicorn processes write their values into
# PLUMB_METRICS_DIR (plumb_site/gunicorn_config.py points prometheus-client's
# PROMETHEUS_MULTIPROC_DIR at it and empties it at start), and a scrape sums them.
PLUMB_METRICS_TOKEN = metrics_token()
PLUMB_METRICS_DIR = VAR_DIR / "metrics"


def cache_config() -> dict:
    """The default cache: the rate-limit counters (mailbox/throttles.py).

    Without REDIS_URL it is each process's memory, so every server process
    counts alone. With it, Django's Redis backend (failing open, common/cache.py)
    shares the counts between every process and host that names the same
    Redis and key prefix.
    """
    url = os.environ.get("REDIS_URL", "").strip()
    if not url:
        return {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parsing the port raises ValueError when it is not one
    except ValueError as exc:
        raise ImproperlyConfigured(f"REDIS_URL is not a usable Redis URL: {exc}") from None
    database = parts.path.lstrip("/")
    if (
        parts.scheme not in ("redis", "rediss", "unix")
        or (parts.scheme != "unix" and not parts.hostname)
        or (parts.scheme == "unix" and not parts.path)
        or (parts.scheme != "unix" and database and not database.isdigit())
    ):
        # The value is not repeated: it may hold the password.
        raise ImproperlyConfigured(
            "REDIS_URL must look like redis://[:password@]host[:port][/db], "
            "rediss://… or unix:///path/to/redis.sock."
        )
    prefix = os.environ.get("PLUMB_CACHE_PREFIX", "plumb").strip()
    if re.fullmatch(r"[A-Za-z0-9_.:-]{1,64}", prefix) is None:
        raise ImproperlyConfigured(
            "PLUMB_CACHE_PREFIX must be 1 to 64 letters, digits or _.:- characters, "
            f"got {prefix!r}."
        )
    return {
        "BACKEND": "common.cache.FailOpenRedisCache",
        "LOCATION": url,
        # Several plumb deployments, or other programs, may share one Redis.
        "KEY_PREFIX": prefix,
        "OPTIONS": {
            # A Redis that stops answering costs a request at most this long
            # before the limits fail open (common/cache.py); loopback or a
            # LAN answers in well under a millisecond.
            "socket_connect_timeout": 1.0,
            "socket_timeout": 1.0,
        },
    }


CACHES = {"default": cache_config()}

# plain: one line of text per record; json: one JSON object per line (common/logs.py).
LOG_FORMAT = env_choice("LOG_FORMAT", "plain", ("plain", "json"))
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "common.logs.JsonFormatter"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO").upper()},
    "loggers": {
        # Django's request logger prints the request line; tokens never travel in
        # URLs here, and bodies are never logged.
        "django.request": {"level": "ERROR"},
    },
}
