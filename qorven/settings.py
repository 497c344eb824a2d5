"""Qorven settings, all read from the environment with django-environ.

Every variable is documented in the README's configuration table. With nothing set, Qorven
runs on the embedded default: SQLite, an in-process channel layer and in-process tasks.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import environ
from kombu import Queue

from qorven.runtime.environment import Env, env_file_check, meta_header_name, secret_key_kept
from qorven.runtime.environment.addresses import broker_url_of_redis
from qorven.runtime.live_redis import live_redis_host
from qorven.runtime.url_prefix import prefix_settings, public_url_under

BASE_DIR = Path(__file__).resolve().parent.parent

env = Env()
# Settings from a `.env` beside manage.py (or the file QORVEN_ENV_FILE names; empty: none,
# as the test suite sets it). Variables already in the environment win. A relative path is
# taken from the project root, as every path setting is: a process started from another
# folder (a service manager, cron, `cd /`) reads the same file.
_ENV_FILE_NAMED = env.str("QORVEN_ENV_FILE") if "QORVEN_ENV_FILE" in env.ENVIRON else None  # "": none
ENV_FILE = "" if _ENV_FILE_NAMED == "" else str((BASE_DIR / (_ENV_FILE_NAMED or ".env")).resolve())
if _ENV_FILE_NAMED and not Path(ENV_FILE).is_file():
    # Named, not there: read as none, every setting in it would quietly take its default.
    # The default .env is optional (a machine configured by its environment has none).
    _looked_at = "" if Path(_ENV_FILE_NAMED).is_absolute() else \
        f" (looked for at {ENV_FILE}: a relative path is taken from the project root)"
    raise environ.ImproperlyConfigured(f"QORVEN_ENV_FILE names {_ENV_FILE_NAMED!r}, which is not a file{_looked_at}")
if ENV_FILE and Path(ENV_FILE).is_file():
    env_file_check(ENV_FILE)
    environ.Env.read_env(ENV_FILE, overwrite=False)

DEBUG = env.bool("DJANGO_DEBUG", default=False)
# Read before the secret key it calls for, so a malformed URL is the error a host sees first.
# A relative SQLite path is taken from the project root too.
_DATABASE = env.database("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}", root=BASE_DIR)
SECRET_KEY = env.str("DJANGO_SECRET_KEY", default="")
if not SECRET_KEY:
    # Every process of a server database's layout, on however many machines, needs the one
    # key; a SQLite file's are on this machine and share the key the embedded default keeps.
    if not _DATABASE["ENGINE"].endswith("sqlite3"):
        raise environ.ImproperlyConfigured("Set DJANGO_SECRET_KEY when DATABASE_URL names a database server.")
    # The embedded default makes its own key once and keeps it in the project folder.
    SECRET_KEY = secret_key_kept(BASE_DIR / ".secret-key")
ALLOWED_HOSTS = env.allowed_hosts("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

# HTTPS hardening: on when the public URL is https (a production install), each part
# overridable. Behind a proxy that terminates TLS, name the header it sets
# (DJANGO_SECURE_PROXY_SSL_HEADER=HTTP_X_FORWARDED_PROTO) or every request redirects.
# The URL platforms and browsers reach this server at (Twilio signs it; WebSocket origins),
# its path included when Qorven is served under one of a shared host: the path is then
# QORVEN_URL_PREFIX, given here or there (qorven/runtime/url_prefix.py).
_PUBLIC_URL = env.public_url("QORVEN_PUBLIC_URL", default="http://127.0.0.1:8000")
QORVEN_PUBLIC_URL_GIVEN = bool(env.str("QORVEN_PUBLIC_URL", default=""))  # hints say when it is a guess
_URL_PREFIX = env.url_prefix("QORVEN_URL_PREFIX", default=urlsplit(_PUBLIC_URL).path)
QORVEN_PUBLIC_URL = public_url_under(_PUBLIC_URL, _URL_PREFIX)
# QORVEN_URL_PREFIX, FORCE_SCRIPT_NAME, STATIC_URL and the cookies' path.
vars().update(prefix_settings(_URL_PREFIX))
HTTPS = env.bool("QORVEN_HTTPS", default=QORVEN_PUBLIC_URL.startswith("https://"))
SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=HTTPS)
SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", default=31_536_000 if HTTPS else 0, at_least=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", default=HTTPS)
SECURE_HSTS_PRELOAD = env.bool("DJANGO_SECURE_HSTS_PRELOAD", default=False)
SESSION_COOKIE_SECURE = env.bool("DJANGO_SESSION_COOKIE_SECURE", default=HTTPS)
CSRF_COOKIE_SECURE = env.bool("DJANGO_CSRF_COOKIE_SECURE", default=HTTPS)
# Named as Django's META names it (HTTP_X_FORWARDED_PROTO) or as the proxy sends it
# (X-Forwarded-Proto): Django compares the META name, which the second never matched.
_PROXY_SSL_HEADER = env.header("DJANGO_SECURE_PROXY_SSL_HEADER", default="")
SECURE_PROXY_SSL_HEADER = (meta_header_name(_PROXY_SSL_HEADER), "https") if _PROXY_SSL_HEADER else None

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_celery_beat",
    # Bottom layer first: each app may import only those listed above it (see the README's map).
    "tenancy",
    "qorven.runtime",
    "sessions_app",
    "memory_app",
    "heartbeats_app",
    "qorven.agent",
    "legacy_app",
    "channels_app",
]

MIDDLEWARE = [
    # First, so every answer gets them, the probes' included (qorven/runtime/security_headers.py).
    "qorven.runtime.security_headers.SecurityHeadersMiddleware",
    "qorven.health.ProbesMiddleware",  # first: probes come by IP, over plain HTTP
    "channels_app.url_nul.NulInAddressMiddleware",  # before anything reads the address into a query
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, so it is the first to see a view's exception.
    "qorven.runtime.database.DatabaseDownMiddleware",
]

ROOT_URLCONF = "qorven.urls"
CSRF_FAILURE_VIEW = "channels_app.api_auth.csrf_failure"  # a JSON endpoint's refusal is JSON
ASGI_APPLICATION = "qorven.asgi.application"

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

DATABASES = {"default": _DATABASE}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Failed sign-ins allowed per username and per client address before the sign-in forms
# refuse for the rest of the window (qorven/login_throttle.py; django-ratelimit rates).
QORVEN_LOGIN_FAILURES_PER_USER = env.rate("QORVEN_LOGIN_FAILURES_PER_USER", "5/15m")
QORVEN_LOGIN_FAILURES_PER_ADDRESS = env.rate("QORVEN_LOGIN_FAILURES_PER_ADDRESS", "20/15m")
# URL names, not paths: under QORVEN_URL_PREFIX they lead there too.
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "chat-index"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = env.time_zone("QORVEN_TIME_ZONE", default="UTC")
USE_I18N = True
USE_TZ = True

STATIC_ROOT = BASE_DIR / "staticfiles"
QORVEN_SERVE_STATIC = env.bool("QORVEN_SERVE_STATIC", default=True)
# The largest JSON body accepted (webhooks, API, chat, webchat); larger ones answer 413.
QORVEN_MAX_BODY = env.int("QORVEN_MAX_BODY", default=1024 * 1024, at_least=1)

REDIS_URL = env.redis_url("REDIS_URL", default="")
# How long a command to Redis (and connecting to it) may take for the cache, Qorven's own
# client (route slots, the stream buffer) and the broker: past it, a Redis that takes
# connections and never answers (a paused machine, packets dropped on the way) is the cache
# away, as one refusing them is, instead of holding every turn, webhook and send that reads
# it. A healthy Redis answers in a millisecond or two: none sends a blocking command but the
# worker's fetch (below), and the slots' longest script walks a few short lists. redis-py 8
# gives up after 5 s by default; the older ones this install allows never did. Once a call
# of the cache or of our client waited it out, both leave that Redis alone for a short rest
# (qorven.runtime.redis_rest), so that a turn pays the timeout once, not at each cache call.
QORVEN_REDIS_TIMEOUT = env.float("QORVEN_REDIS_TIMEOUT", default=5.0, above=0)

# Room for a streamed reply's chunks queued for one socket: past it, a socket misses events
# and catches up from the database (and the stream cache) instead.
QORVEN_LIVE_CAPACITY = env.int("QORVEN_LIVE_CAPACITY", default=1000, at_least=1)
# With Redis: "pubsub" (the default) sends one PUBLISH per event, which each process's hub
# hands to its own sockets; "lists" is channels_redis' list-per-channel layer (a Redis
# write and a read per process and event, bounded by QORVEN_LIVE_CAPACITY), which backs up
# when many chats are busy at once (docs/performance.md). Neither keeps events for a socket
# that was away: it catches up from the database by seq.
QORVEN_LIVE_LAYER = env.choice("QORVEN_LIVE_LAYER", "pubsub", ("pubsub", "lists"))
# The ASGI server of `qorven serve`: uvicorn (about twice as fast as Daphne to fan live
# events out to many sockets and to take webhooks: docs/performance.md), or daphne.
QORVEN_ASGI_SERVER = env.choice("QORVEN_ASGI_SERVER", "uvicorn", ("daphne", "uvicorn"))
# The live layer's Redis connections have no socket timeout (redis-py's asyncio.wait_for
# drops cancellations on Python 3.11: qorven.runtime.live_redis says how): the system closes
# one whose data goes unacknowledged for twice QORVEN_REDIS_TIMEOUT (TCP_USER_TIMEOUT, on
# Linux), or whose idle peer is gone (TCP keepalive); connecting waits QORVEN_REDIS_TIMEOUT.
LIVE_REDIS_HOST = live_redis_host(REDIS_URL, QORVEN_REDIS_TIMEOUT)
# The live layer's key prefix in Redis: installs (or test runs) sharing one Redis database
# keep their groups apart with prefixes of their own.
QORVEN_LIVE_PREFIX = env.str("QORVEN_LIVE_PREFIX", default="asgi")
if REDIS_URL and QORVEN_LIVE_LAYER == "pubsub":
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [LIVE_REDIS_HOST], "prefix": QORVEN_LIVE_PREFIX},
        }
    }
elif REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [LIVE_REDIS_HOST], "capacity": QORVEN_LIVE_CAPACITY,
                       "prefix": QORVEN_LIVE_PREFIX},
        }
    }
else:
    # Thread-safe: events are sent from task and sender threads to Daphne's loop.
    CHANNEL_LAYERS = {"default": {"BACKEND": "qorven.runtime.layers.InMemoryChannelLayer",
                                  "CONFIG": {"capacity": QORVEN_LIVE_CAPACITY}}}
# The cache's key prefix in Redis, like QORVEN_LIVE_PREFIX for the live layer: installs (or
# test runs) sharing one Redis database keep their counters and cooldowns apart.
QORVEN_CACHE_PREFIX = env.str("QORVEN_CACHE_PREFIX", default="qorven")
if REDIS_URL:
    # Shared by every process: the text of replies still streaming (qorven/streams.py),
    # rate-limit counters.
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL,
                          "KEY_PREFIX": QORVEN_CACHE_PREFIX,
                          "OPTIONS": {"socket_timeout": QORVEN_REDIS_TIMEOUT,
                                      "socket_connect_timeout": QORVEN_REDIS_TIMEOUT,
                                      "pool_class": "qorven.runtime.redis_rest.RestingPool"}}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# Celery. Without a broker, tasks go to the embedded broker of the process that queues
# them and run there on a Celery worker thread with a small pool (qorven/runtime/worker.py):
# the same task semantics as `qorven worker`, retries and countdowns included.
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=broker_url_of_redis(REDIS_URL)) or "embedded://localhost"
QORVEN_WORKER_CONCURRENCY = env.int("QORVEN_WORKER_CONCURRENCY", default=4, at_least=1)
# How long a process keeps the channel bindings and switches webhooks read on every
# request (qorven.runtime.row_cache); a change made in another process shows within it.
QORVEN_ROUTE_CACHE_SECONDS = env.float("QORVEN_ROUTE_CACHE_SECONDS", default=5.0, at_least=0)
# Sends to the platforms have a queue of their own, which every worker takes from beside the
# main one, in turn: a backlog of turns never holds up the sending of replies already written.
CELERY_TASK_DEFAULT_QUEUE = "celery"
CELERY_TASK_QUEUES = (Queue("celery"), Queue("qorven.outbound"))
CELERY_TASK_ROUTES = {"channels_app.deliver": {"queue": "qorven.outbound"},
                      "channels_app.plan_delivery": {"queue": "qorven.outbound"}}
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Workers and beat log through LOGGING below (the JSON format, the ids, the masking of
# keys): Celery would otherwise replace the root logger's handler as it starts.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = TIME_ZONE
CELERY_TASK_TIME_LIMIT = env.int("QORVEN_TASK_TIME_LIMIT", default=900, at_least=1)
# Redis re-delivers an unacknowledged task after this; it must outlast the longest task.
# Its commands and connecting bounded by QORVEN_REDIS_TIMEOUT too: kombu's Redis transport
# sets no timeout (not even redis-py 8's 5 s), so a publish to a Redis that hung waited for
# ever. The worker's fetch (BRPOP, answered by Redis within 1 s) is not cut by it: its reply
# is waited for on the worker's event loop, not in a read (kombu drops one overdue past its
# health_check_interval).
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, Any] = {"visibility_timeout": CELERY_TASK_TIME_LIMIT * 2,
                                                   "socket_timeout": QORVEN_REDIS_TIMEOUT,
                                                   "socket_connect_timeout": QORVEN_REDIS_TIMEOUT}
# Before every key of the broker's (its queues, the tasks taken and not yet done): installs
# sharing one Redis database, each with a prefix of its own, never run each other's tasks.
QORVEN_BROKER_PREFIX = env.str("QORVEN_BROKER_PREFIX", default="")
if QORVEN_BROKER_PREFIX:
    CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"] = QORVEN_BROKER_PREFIX
# django-celery-beat's DatabaseScheduler, telling heartbeat runs which tick they are for.
CELERY_BEAT_SCHEDULER = "heartbeats_app.scheduler:HeartbeatScheduler"
# The sweeper queues again what a dead worker left behind (channels_app/sweep.py): every
# this many seconds, and whenever a worker starts.
QORVEN_SWEEP_INTERVAL = env.float("QORVEN_SWEEP_INTERVAL", default=15.0, above=0)
CELERY_BEAT_SCHEDULE = {
    "__qorven_sweep__": {"task": "channels_app.sweep", "schedule": QORVEN_SWEEP_INTERVAL},
}
# Celery's own defaults for what it reads on every publish, named here: a name Django's
# settings lack is looked up through two failed attribute reads each time, a quarter of
# what publishing a task costs (tests/qorven/test_celery_settings.py).
CELERY_TASK_ALWAYS_EAGER = False
CELERY_TASK_REPR_MAXLEVELS = 3
CELERY_BROKER_POOL_ACQUIRE_TIMEOUT = None
CELERY_TASK_SEND_SENT_EVENT = False

# Heartbeats: the defaults file synced on startup, and how long images are kept by the
# reserved __qorven_clear_images__ beat (seconds or 30m / 12h / 7d / 2w; 0 = delete all).
# A relative path, here as in QORVEN_SKILLS_DIR and QORVEN_BACKUP_DIR, is taken from the
# project root (where .env is): the same file whichever folder serve, the worker or a
# command starts in.
QORVEN_HEARTBEATS_FILE = BASE_DIR / (env.str("QORVEN_HEARTBEATS_FILE", default="").strip()
                                     or "heartbeats.default.json")
QORVEN_IMAGE_RETENTION = env.duration("QORVEN_IMAGE_RETENTION", default="0")
# How long a processed (or failed) inbound event is kept, to recognise a platform's late
# retry of it (WhatsApp retries for up to 7 days); 0 = forever.
QORVEN_INBOUND_RETENTION = env.duration("QORVEN_INBOUND_RETENTION", default="30d")
# How long a reply's part sent to a platform is kept, to never send it twice (a retry, the
# sweeper, a platform's later report of it); failed parts are kept; 0 = forever.
QORVEN_DELIVERY_RETENTION = env.duration("QORVEN_DELIVERY_RETENTION", default="30d")
# How long a heartbeat's finished runs (and the cron sessions they ran in) are kept; 0 = forever.
QORVEN_HEARTBEAT_RUN_RETENTION = env.duration("QORVEN_HEARTBEAT_RUN_RETENTION", default="30d")
# A run whose model was unavailable is retried after this many seconds, then four times as long.
QORVEN_HEARTBEAT_RETRY_DELAY = env.float("QORVEN_HEARTBEAT_RETRY_DELAY", default=60.0, at_least=0)

# Scheduled backups (qorven.runtime.scheduled_backups): when, as a cron expression in
# QORVEN_TIME_ZONE (empty: never); where (a relative path is taken from the project root,
# like the embedded default's database beside it); how many of the newest are kept (0: all).
QORVEN_BACKUP_SCHEDULE = env.str("QORVEN_BACKUP_SCHEDULE", default="").strip()
if QORVEN_BACKUP_SCHEDULE:
    from heartbeats_app.cron import CronError, cron_parse  # no app machinery: the parser alone

    try:
        QORVEN_BACKUP_SCHEDULE = cron_parse(QORVEN_BACKUP_SCHEDULE).expression
    except CronError as exc:
        raise environ.ImproperlyConfigured(
            f"QORVEN_BACKUP_SCHEDULE must be a cron expression like '30 3 * * *' (or empty: no scheduled "
            f"backups): {exc}") from None
QORVEN_BACKUP_DIR = BASE_DIR / (env.str("QORVEN_BACKUP_DIR", default="").strip() or "backups")
QORVEN_BACKUP_KEEP = env.int("QORVEN_BACKUP_KEEP", default=7, at_least=0)

# Product switches.
QORVEN_LEGACY_SESSIONS = env.bool("QORVEN_LEGACY_SESSIONS", default=False)
QORVEN_API_PAGE_MAX = env.int("QORVEN_API_PAGE_MAX", default=500, at_least=1)
# The furthest ahead a webchat visitor token may expire, in seconds (channels_app/webchat.py).
QORVEN_WEBCHAT_MAX_TTL = env.int("QORVEN_WEBCHAT_MAX_TTL", default=7 * 86400, at_least=1)
# An anonymous webchat visitor's token lasts this long after its last use (each message
# renews it); then the visitor starts a new chat.
QORVEN_WEBCHAT_VISITOR_TTL = env.int("QORVEN_WEBCHAT_VISITOR_TTL", default=30 * 24 * 3600, at_least=1)
# Webchat limits (django-ratelimit rates, "N/s|m|h|d"; counted in the cache): new anonymous
# visitors per client address and webchat, and messages per visitor and webchat.
QORVEN_WEBCHAT_NEW_VISITOR_RATE = env.rate("QORVEN_WEBCHAT_NEW_VISITOR_RATE", "10/h")
QORVEN_WEBCHAT_MESSAGE_RATE = env.rate("QORVEN_WEBCHAT_MESSAGE_RATE", "20/m")
# Exports of a person's own data (GET /v1/export, the chat page's download) per person: each
# reads everything they have.
QORVEN_EXPORT_RATE = env.rate("QORVEN_EXPORT_RATE", "5/h")
# Seconds a download of one may take: its snapshot holds back VACUUM (and a migration) on
# PostgreSQL for as long as it lasts, however slowly its client reads.
QORVEN_EXPORT_TIMEOUT = env.int("QORVEN_EXPORT_TIMEOUT", default=1800, at_least=1)
# Behind a reverse proxy, the request header that holds the client address (e.g.
# HTTP_X_FORWARDED_FOR), believed only from QORVEN_TRUSTED_PROXIES: the connection's
# address is replaced with it before anything sees it (qorven/runtime/client_address.py),
# so the limits, the logs and /metrics' address rule all read the client's own.
QORVEN_CLIENT_IP_HEADER = env.header("QORVEN_CLIENT_IP_HEADER", default="")
QORVEN_TRUSTED_PROXIES = env.networks("QORVEN_TRUSTED_PROXIES", default=["127.0.0.1", "::1"])
RATELIMIT_CACHE_PREFIX = "qorven-rl:"

# Every line carries the tenant, Qor, session and message it is about (qorven.runtime.
# log_context); QORVEN_LOG_FORMAT=json writes one JSON object a line; keys and tokens
# quoted in messages, tracebacks and stacks are masked, in either format, and so are email
# addresses and phone numbers (a platform quoting a recipient in its error), and the
# platform id of the person whose message or reply is being handled (log_person).
QORVEN_LOG_FORMAT = env.choice("QORVEN_LOG_FORMAT", "text", ("text", "json"))
QORVEN_LOG_LEVEL = env.log_level("QORVEN_LOG_LEVEL", default="INFO")
# Prometheus metrics at /metrics: with a token, only to `Authorization: Bearer <token>`;
# without one, only to these client addresses.
QORVEN_METRICS_TOKEN = env.str("QORVEN_METRICS_TOKEN", default="")
QORVEN_METRICS_ALLOW = env.addresses("QORVEN_METRICS_ALLOW", default=["127.0.0.1", "::1"])
# `qorven worker` serves its own processes' turns and model calls on this port (0: off).
QORVEN_WORKER_METRICS_PORT = env.int("QORVEN_WORKER_METRICS_PORT", default=0, at_least=0, at_most=65535)
# Django's error report hides a URL's credentials too, whatever its setting is called.
DEFAULT_EXCEPTION_REPORTER_FILTER = "qorven.runtime.error_reports.CredentialsHidden"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "context": {"()": "qorven.runtime.log_context.ContextFilter"},
        "secrets": {"()": "qorven.runtime.log_context.SecretFilter"},
        "upkeep": {"()": "qorven.runtime.log_context.UpkeepFilter"},
        "repeats": {"()": "qorven.runtime.log_context.RepeatsFilter"},
        "client_errors": {"()": "qorven.runtime.log_context.ClientErrorFilter"},
    },
    "formatters": {
        "text": {"format": "%(asctime)s %(levelname)s %(name)s %(context)s%(message)s"},
        "json": {"()": "qorven.runtime.log_context.JsonFormatter"},
    },
    # client_errors first: a 4xx's traceback is dropped before the secrets filter renders it.
    "handlers": {"console": {"class": "logging.StreamHandler", "filters": ["client_errors", "secrets", "context"],
                             "formatter": "json" if QORVEN_LOG_FORMAT == "json" else "text"}},
    "root": {"handlers": ["console"], "level": QORVEN_LOG_LEVEL},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # The beat's line for each upkeep task sent (the sweep: every 15 s); heartbeats stay.
        "celery.beat": {"filters": ["upkeep"]},
        # The pub/sub live layer's receive loop with Redis away: a traceback a second.
        "channels_redis.pubsub": {"filters": ["repeats"]},
        # Client libraries log request URLs, and a Telegram URL carries the bot token.
        "httpx": {"level": "WARNING"},
        "httpx2": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
        # The embedded worker's task lines ("received", "succeeded") would interleave with
        # the web server's; `qorven worker` logs them as Celery always does.
        **({"celery.worker.strategy": {"level": "WARNING"}, "celery.app.trace": {"level": "WARNING"}}
           if CELERY_BROKER_URL.startswith("embedded://") else {}),
    },
}

# Models. Any OpenAI-compatible server (OpenAI, Ollama, vLLM, LM Studio, OpenRouter).
# With no model configured (here or on the Qor), a built-in offline provider answers.
OPENAI_BASE_URL = env.http_url("OPENAI_BASE_URL", default="")
OPENAI_API_KEY = env.str("OPENAI_API_KEY", default="")
# Other model servers (base URLs) the host trusts with OPENAI_API_KEY; a Qor routed
# anywhere else gets no key (qorven/llm/routes.py).
QORVEN_MODEL_KEY_URLS = env.http_urls("QORVEN_MODEL_KEY_URLS", default=[])
# Private, loopback or link-local hosts (names, addresses or networks) that URLs stored in
# the database may still reach, e.g. a model server on the local network
# (qorven/runtime/outbound.py).
QORVEN_ALLOW_PRIVATE_HOSTS = env.hosts("QORVEN_ALLOW_PRIVATE_HOSTS", default=[])
# The proxy those URLs are reached through: empty (direct), `env` (the environment's
# HTTPS_PROXY / HTTP_PROXY / NO_PROXY, as the host's own clients use them) or a proxy's
# URL (qorven/runtime/outbound_transport.py).
QORVEN_OUTBOUND_PROXY = env.outbound_proxy("QORVEN_OUTBOUND_PROXY", default="")
QORVEN_MODEL = env.str("QORVEN_MODEL", default="")
QORVEN_NUM_CTX = env.int("QORVEN_NUM_CTX", default=8192, at_least=1)
QORVEN_CONTEXT_RESERVE = env.int("QORVEN_CONTEXT_RESERVE", default=1024, at_least=0)
# Images: how many of the newest in the window a vision route is sent, and the largest
# file the chat page and the webchat accept (bytes).
QORVEN_PROMPT_IMAGES = env.int("QORVEN_PROMPT_IMAGES", default=4, at_least=0)
# The most of a Qor's project file (AGENTS.md, CLAUDE.md or README.md of its project folder)
# read into a prompt, in characters; the rest is cut with a note.
QORVEN_PROJECT_FILE_CHARS = env.int("QORVEN_PROJECT_FILE_CHARS", default=16000, at_least=0)
QORVEN_MAX_UPLOAD = env.int("QORVEN_MAX_UPLOAD", default=10 * 1024 * 1024, at_least=1)
# Characters of attached text files read into one prompt (newest first); 0: notes only.
QORVEN_PROMPT_FILE_CHARS = env.int("QORVEN_PROMPT_FILE_CHARS", default=8000, at_least=0)
# A PDF's text is read once, in a child process (qorven.agent.pdf_text): at most this many
# pages, and for at most this many seconds; past either, the PDF keeps its note.
QORVEN_PDF_PAGES = env.int("QORVEN_PDF_PAGES", default=100, at_least=1)
QORVEN_PDF_SECONDS = env.float("QORVEN_PDF_SECONDS", default=20.0, above=0)
# The longest reply taken from the model, in characters (0: no bound): past it the reply is
# cut there and said to be cut, as when the model's own length limit ends it. A tool call's
# name and arguments have the same bound, each call its own; and one answer makes at most
# QORVEN_MAX_TOOL_CALLS calls. Past either, the answer ends cut and none of its tools run.
QORVEN_MAX_REPLY_CHARS = env.int("QORVEN_MAX_REPLY_CHARS", default=32_000, at_least=0)
QORVEN_MAX_TOOL_CALLS = env.int("QORVEN_MAX_TOOL_CALLS", default=32, at_least=1)
QORVEN_MAX_TOOL_ROUNDS = env.int("QORVEN_MAX_TOOL_ROUNDS", default=8, at_least=1)
QORVEN_MODEL_TIMEOUT = env.float("QORVEN_MODEL_TIMEOUT", default=60.0, above=0)
QORVEN_MODEL_RETRIES = env.int("QORVEN_MODEL_RETRIES", default=4, at_least=0)
QORVEN_MODEL_DEADLINE = env.float("QORVEN_MODEL_DEADLINE", default=180.0, above=0)
# MCP servers' tools (qorven.agent.mcp): a call's time, a result's size, a tool list's age.
QORVEN_MCP_TIMEOUT = env.float("QORVEN_MCP_TIMEOUT", default=30.0, above=0)
QORVEN_MCP_RESULT_CHARS = env.int("QORVEN_MCP_RESULT_CHARS", default=8000, at_least=1)
QORVEN_MCP_TOOLS_TTL = env.float("QORVEN_MCP_TOOLS_TTL", default=300.0, at_least=0)
QORVEN_MCP_IDLE = env.float("QORVEN_MCP_IDLE", default=300.0, at_least=0)
# A turn holds its session for this long, renewed every third of it while it runs: a turn
# whose worker died frees its session within this many seconds.
QORVEN_TURN_LEASE = env.int("QORVEN_TURN_LEASE", default=30, at_least=1)
# Auto mode's summarizer runs once the conversation has been quiet this long (no turn
# running, nothing from the person): it does not compete with their next turn for the model
# or the CPUs. 0: at once, after every exchange over the window.
QORVEN_SUMMARIZER_QUIET = env.float("QORVEN_SUMMARIZER_QUIET", default=5.0, at_least=0)
# A message the model could not answer for a transient reason (unreachable, 5xx, rate
# limited) is tried this many times in all, QORVEN_ANSWER_RETRY_DELAY seconds apart at
# first and four times longer each time, before it is marked failed.
QORVEN_ANSWER_ATTEMPTS = env.int("QORVEN_ANSWER_ATTEMPTS", default=3, at_least=1)
QORVEN_ANSWER_RETRY_DELAY = env.float("QORVEN_ANSWER_RETRY_DELAY", default=5.0, at_least=0)
# A voice note the transcriber could not hear for a transient reason is tried this many
# more times, QORVEN_VOICE_RETRY_DELAY seconds later, then four times as long each time.
QORVEN_VOICE_RETRIES = env.int("QORVEN_VOICE_RETRIES", default=4, at_least=0)
QORVEN_VOICE_RETRY_DELAY = env.float("QORVEN_VOICE_RETRY_DELAY", default=5.0, at_least=0)

# Platforms. Every API base URL can point elsewhere (tests, self-hosted proxies).
TELEGRAM_API_BASE = env.http_url("TELEGRAM_API_BASE", default="https://api.telegram.org")
WHATSAPP_API_BASE = env.http_url("WHATSAPP_API_BASE", default="https://graph.facebook.com/v21.0")
SLACK_API_BASE = env.http_url("SLACK_API_BASE", default="https://slack.com/api")
DISCORD_API_BASE = env.http_url("DISCORD_API_BASE", default="https://discord.com/api/v10")
TWILIO_API_BASE = env.http_url("TWILIO_API_BASE", default="https://api.twilio.com")
QORVEN_PLATFORM_TIMEOUT = env.float("QORVEN_PLATFORM_TIMEOUT", default=20.0, above=0)
QORVEN_SEND_RETRIES = env.int("QORVEN_SEND_RETRIES", default=6, at_least=0)
QORVEN_SEND_BACKOFF = env.float("QORVEN_SEND_BACKOFF", default=1.0, at_least=0)
# Platform sends one worker runs at once (channels_app/send_gate.py); the rest of its slots
# stay free for turns and heartbeats while a platform hangs.
QORVEN_SEND_SLOTS = env.int("QORVEN_SEND_SLOTS", default=max(QORVEN_WORKER_CONCURRENCY // 2, 1), at_least=1)
# Where a bot's one-send-at-a-time gate and a worker's send slots are kept on PostgreSQL
# (channels_app/send_gate.py): advisory locks of the sending connection ("database"), or
# keys in the cache, that is Redis ("cache"), for a pooler that hands a session's
# statements to different server connections (PgBouncer in transaction mode).
QORVEN_SEND_GATES = env.choice("QORVEN_SEND_GATES", "database", ("database", "cache"))
QORVEN_PAIRING_TTL = env.int("QORVEN_PAIRING_TTL", default=3600, at_least=1)
# A pending code is sent again, to a sender who writes again, at most this often (seconds):
# a forged sender address cannot make the Qor mail or text someone on every message.
QORVEN_PAIRING_RESEND = env.int("QORVEN_PAIRING_RESEND", default=300, at_least=0)

# Outbound mail (email channel replies). e.g. smtp+tls://user:pass@smtp.example.com:587
# Unset: no mail server, and a reply to an email fails saying so (qorven.runtime.mail);
# Django's console backend printed every reply, its recipient and text, to the output.
_MAIL_SERVER = env.mail_server("EMAIL_URL")
if _MAIL_SERVER:
    vars().update(_MAIL_SERVER)
else:
    EMAIL_BACKEND = "qorven.runtime.mail.NoMailServer"

# Learned skills: `*.md` files synced into the database at startup and by `qorven sync-skills`.
QORVEN_SKILLS_DIR = BASE_DIR / (env.str("QORVEN_SKILLS_DIR", default="").strip() or "plugins/skills")
