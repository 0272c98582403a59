"""Django and its libraries: apps, middleware, database, Redis, files, the API, security."""

import os
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import environ

from config.settings.env import env, fail, setting

BASE_DIR = Path(__file__).resolve().parents[2]

GANTRY_ENV = setting("str", "GANTRY_ENV", "development")
if GANTRY_ENV not in ("development", "production", "test"):
    fail("GANTRY_ENV", f"must be development, production or test, not {GANTRY_ENV!r}")
PRODUCTION = GANTRY_ENV == "production"

DATA_DIR = Path(setting("str", "GANTRY_DATA_DIR", str(BASE_DIR / "var"))).resolve()

SECRET_KEY = setting("str", "SECRET_KEY", "")
if not SECRET_KEY:
    if PRODUCTION:
        fail("SECRET_KEY", "must be set in production (50+ random characters)")
    # Development only: a key kept beside the data so sessions survive restarts.
    key_file = DATA_DIR / "secret_key"
    if key_file.exists():
        SECRET_KEY = key_file.read_text().strip()
    else:
        from django.core.management.utils import get_random_secret_key

        DATA_DIR.mkdir(parents=True, exist_ok=True)
        SECRET_KEY = get_random_secret_key()
        key_file.write_text(SECRET_KEY)
        key_file.chmod(0o600)

# Off unless asked for, in development too: Django's debug pages list every URL pattern and
# settings to whoever hits an error. DEBUG=true while working on Gantry itself.
DEBUG = setting("bool", "DEBUG", False)
ALLOWED_HOSTS = setting(
    "list", "ALLOWED_HOSTS", [] if PRODUCTION else ["localhost", "127.0.0.1", "[::1]", "testserver"]
)
CSRF_TRUSTED_ORIGINS = setting("list", "CSRF_TRUSTED_ORIGINS", [])
# The port `manage.py serve` (and so `make run`) listens on, and the address executors and
# the notebook origin use to reach Gantry (jobs run outside the request cycle): by default
# this machine on that address and port, so GANTRY_HOST and GANTRY_PORT alone move both (a
# server listening on every interface is still reached on loopback from this machine).
GANTRY_HOST = setting("str", "GANTRY_HOST", "127.0.0.1")
GANTRY_PORT = setting("int", "GANTRY_PORT", 8000)
if not 0 < GANTRY_PORT < 65536:
    fail("GANTRY_PORT", f"a TCP port, 1 to 65535, not {GANTRY_PORT}")
_reach_host = {"0.0.0.0": "127.0.0.1", "::": "[::1]", "": "127.0.0.1"}.get(GANTRY_HOST, GANTRY_HOST)
if ":" in _reach_host and not _reach_host.startswith("["):
    _reach_host = f"[{_reach_host}]"
GANTRY_URL = setting("str", "GANTRY_URL", f"http://{_reach_host}:{GANTRY_PORT}").rstrip("/")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "channels",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_q",
    "django_htmx",
    "axes",
    # The project itself, above every app: commands that need them all (seed_demo, seed_lab).
    "config",
    "core",
    "accounts",
    "projects",
    "cluster",
    "jobs",
    "interactive",
    "scheduling",
    "images",
    "modelhub",
    "datasets",
    "snapshots",
    "tracking",
    "sweeps",
    "notifications",
    "checkpoints",
    "telemetry",
    "endpoints",
]

MIDDLEWARE = [
    # ETags from the body sent (If-None-Match gets 304): no cache to keep in step.
    "django.middleware.http.ConditionalGetMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "core.middleware.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "core.middleware.ClientAddressMiddleware",
    "accounts.middleware.CurrentTenantMiddleware",
    # Last, as django-axes asks: turns a refused sign-in into its lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

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
                "projects.context_processors.gantry",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------
DATABASE_URL = setting("str", "DATABASE_URL", "")
if DATABASE_URL:
    try:
        DATABASES = {"default": env.db_url_config(DATABASE_URL)}
    except (ValueError, KeyError, environ.ImproperlyConfigured) as exc:
        fail("DATABASE_URL", f"{exc}; expected e.g. postgres://user:pass@host:5432/gantry")
    # Under ASGI (websockets, `make run`) every request's sync code runs in a thread of its
    # own: a persistent connection (CONN_MAX_AGE > 0) would stay with that thread, never
    # reused or closed, until PostgreSQL answers "too many clients". So each process keeps
    # a pool (psycopg_pool) of at most DATABASE_POOL_SIZE connections that requests borrow
    # and give back; requests beyond it wait for one. 0 opens one connection per request.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    if DATABASES["default"]["ENGINE"].endswith("postgresql"):
        pool_size = setting("int", "DATABASE_POOL_SIZE", 8)
        if pool_size < 0:
            fail("DATABASE_POOL_SIZE", "a number of connections, 0 or more")
        if pool_size:
            DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
                "min_size": 1,
                "max_size": pool_size,
                "timeout": setting("int", "DATABASE_POOL_TIMEOUT", 20),
            }
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    # Statements a pooled connection runs often are prepared once (psycopg prepares a
    # statement on its fifth run; it needs server-side parameter binding): PostgreSQL
    # then skips planning them again, a third of a small page's database time. Off
    # behind a pooler in transaction mode (PgBouncer before 1.21), which cannot keep them.
    if DATABASES["default"]["ENGINE"].endswith("postgresql") and setting(
        "bool", "DATABASE_PREPARED_STATEMENTS", True
    ):
        DATABASES["default"].setdefault("OPTIONS", {}).update(
            server_side_binding=True, prepare_threshold=5
        )
    if DATABASES["default"]["ENGINE"].endswith("sqlite3"):  # as below: no "database is locked"
        DATABASES["default"].setdefault("OPTIONS", {}).setdefault("transaction_mode", "IMMEDIATE")
else:
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": DATA_DIR / "gantry.sqlite3",
            "OPTIONS": {
                # WAL lets the web server and the worker read while one writes;
                # IMMEDIATE avoids "database is locked" on upgrade from read to write.
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
            },
            # Tests run real executors against a live server in other threads and
            # processes: they need a file, not a connection-private in-memory database.
            "TEST": {"NAME": str(DATA_DIR / f"test-{os.getpid()}.sqlite3")},
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: channel layer, task broker, cache ----------------------------
REDIS_URL = setting("str", "REDIS_URL", "")
if REDIS_URL and not REDIS_URL.startswith(("redis://", "rediss://", "unix://")):
    fail("REDIS_URL", "must start with redis://, rediss:// or unix://")
if REDIS_URL:
    _redis = urlsplit(REDIS_URL)
    _redis_query = dict(parse_qsl(_redis.query))
    REDIS_DB = int(_redis_query.get("db") or (_redis.path.strip("/") if _redis.scheme != "unix" else "") or 0)
    if os.environ.get("PYTEST_XDIST_WORKER", "").startswith("gw") and not os.environ.get(
        "GANTRY_TEST_WORKER_REDIS"
    ):
        # Test runs in parallel (pytest-xdist) share one Redis server: each worker takes
        # a database of its own, counting down from REDIS_URL's (the tests clear theirs).
        # The servers and workers a test starts inherit the worker's, not a second shift.
        REDIS_DB -= int(os.environ["PYTEST_XDIST_WORKER"][2:])
        if REDIS_DB < 0:
            fail("REDIS_URL", "too few Redis databases below it for this many test workers")
        _redis_query["db"] = str(REDIS_DB)
        REDIS_URL = urlunsplit(
            _redis._replace(path=_redis.path if _redis.scheme == "unix" else "", query=urlencode(_redis_query))
        )
        os.environ["REDIS_URL"] = os.environ["GANTRY_TEST_WORKER_REDIS"] = REDIS_URL

if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            # Pub/sub ignores the database number: the prefix carries it, so Gantrys (or
            # parallel test workers) on one Redis server in different databases never
            # hear each other's groups (job ids repeat across their databases).
            "CONFIG": {"hosts": [REDIS_URL], "prefix": f"gantry{REDIS_DB}"},
        }
    }
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
    }
    # Sessions read from Redis, written through to the database. Only with a shared
    # cache: a per-process one would keep a signed-out session alive in other processes.
    SESSION_ENGINE = "django.contrib.sessions.backends.cached_db"
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

Q_CLUSTER = {
    "name": "gantry",
    "workers": setting("int", "GANTRY_WORKERS", 2),
    "timeout": 600,
    "retry": 660,
    "max_attempts": 1,
    "catch_up": False,
    # How long the ORM broker sleeps when its queue is empty (Redis blocks on BLPOP
    # instead): a submit's kick after a quiet spell waited up to this long, 0.25 s on
    # average (bench/submit_latency.py); 0.1 s costs one indexed query every 0.1 s.
    "poll": 0.1,
    "label": "Background tasks",
}
if REDIS_URL:
    Q_CLUSTER["redis"] = REDIS_URL
else:
    Q_CLUSTER["orm"] = "default"

# --- Files ---------------------------------------------------------------
STATIC_URL = "/static/"
# Where `collectstatic` puts the files production serves (WhiteNoise, or nginx: platform/nginx/).
STATIC_ROOT = Path(setting("str", "GANTRY_STATIC_ROOT", str(BASE_DIR / "staticfiles"))).resolve()
STATICFILES_DIRS = [BASE_DIR / "static"]
MEDIA_ROOT = DATA_DIR / "files"
MEDIA_URL = "/files/"
# Development serves static files straight from the source folders; production
# runs `collectstatic` (compressed, hashed names) and WhiteNoise serves the result.
WHITENOISE_USE_FINDERS = not PRODUCTION
# Files browsers ask for at the site's root (favicon.ico), served as they are.
WHITENOISE_ROOT = BASE_DIR / "core" / "root"
WHITENOISE_AUTOREFRESH = not PRODUCTION
GANTRY_STORAGE = setting("str", "GANTRY_STORAGE", "filesystem")
if GANTRY_STORAGE == "filesystem":
    default_storage = {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": MEDIA_ROOT},
    }
elif GANTRY_STORAGE == "s3":
    # Ceph RADOS Gateway speaks S3 with path-style addressing and s3v4 signatures.
    default_storage = {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "endpoint_url": setting("str", "S3_ENDPOINT_URL", None),
            "bucket_name": setting("str", "S3_BUCKET", "gantry"),
            "access_key": setting("str", "S3_ACCESS_KEY_ID", None),
            "secret_key": setting("str", "S3_SECRET_ACCESS_KEY", None),
            "region_name": setting("str", "S3_REGION", "us-east-1"),
            "addressing_style": "path",
            "signature_version": "s3v4",
            "file_overwrite": False,
            "default_acl": None,
        },
    }
else:
    fail("GANTRY_STORAGE", f"must be filesystem or s3, not {GANTRY_STORAGE!r}")
STORAGES = {
    "default": default_storage,
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if PRODUCTION
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}

# --- API -----------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.authentication.ApiTokenAuthentication",
        "accounts.authentication.OidcBearerAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["core.api.MatrixPermission"],
    "DEFAULT_PAGINATION_CLASS": "core.api.Pagination",
    # DRF's, refusing text no field could store and JSON that would crash later.
    "DEFAULT_PARSER_CLASSES": [
        "core.parsers.JSONParser",
        "core.parsers.FormParser",
        "core.parsers.MultiPartParser",
    ],
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": ["core.api.FilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "core.api.exception_handler",
    "DEFAULT_THROTTLE_RATES": {"token_create": "30/hour"},
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Gantry API",
    "DESCRIPTION": "Tenants, projects, datasets, images, models and GPU jobs.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # Vendored Swagger UI: deployments may be offline.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "core.schema.add_error_responses",
    ],
    "ENUM_NAME_OVERRIDES": {
        "TenantRoleEnum": "accounts.models.TenantRole",
        "ProjectRoleEnum": "projects.models.ProjectRole",
        "JobStateEnum": "jobs.states.JobState",
        "ImageBuildStateEnum": "images.models.BuildState",
        "UploadStateEnum": "datasets.models.UploadState",
        "ProjectVisibilityEnum": "projects.models.Visibility",
        "ImageVisibilityEnum": "images.models.ImageVisibility",
        "SnapshotStateEnum": "snapshots.models.SnapshotState",
        "SweepStateEnum": "sweeps.models.SweepState",
        "TrialStateEnum": "sweeps.models.TrialState",
        "DeliveryStateEnum": "notifications.models.DeliveryState",
        "CheckpointStateEnum": "checkpoints.models.CheckpointState",
        "NotificationEventEnum": "notifications.models.Event",
        "NotificationChannelEnum": "notifications.models.Channel",
    },
}

# --- i18n ----------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = setting("str", "TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

# --- Security ------------------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # HTMX reads the token from the page, not the cookie
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024 * 1024
# Uploaded files above this size spool to a temporary file instead of memory. Dataset
# bytes go straight to object storage (presigned URLs), never through these limits.
FILE_UPLOAD_MAX_MEMORY_SIZE = 2621440
DATA_UPLOAD_MAX_NUMBER_FIELDS = 1000
# Content-Security-Policy (core.middleware): the vendored assets need no inline script
# or style; the SSO provider's origin joins form-action when configured.
GANTRY_CSP = {
    "default-src": ["'self'"],
    "script-src": ["'self'"],
    "style-src": ["'self'"],
    "img-src": ["'self'", "data:"],
    "connect-src": ["'self'", "ws:", "wss:"],
    "frame-ancestors": ["'none'"],
    "object-src": ["'none'"],
    "base-uri": ["'self'"],
    "form-action": ["'self'"],
}
# Pages exempt from the policy (none: JupyterLab is served from the notebook origin).
GANTRY_CSP_EXEMPT_URL_NAMES = []
# Per page (URL name): Swagger UI's script is a file (the split view), but its React code
# injects a <style> element at run time; inline styles only, scripts stay 'self'.
# "browsable-api": every page DRF's browsable API renders (its templates carry inline
# styles: a <style> of highlighting and style attributes).
GANTRY_CSP_OVERRIDES = {
    "api-docs": {"style-src": ["'self'", "'unsafe-inline'"]},
    "browsable-api": {"style-src": ["'self'", "'unsafe-inline'"]},
    # The job page's terminal: xterm.js sizes its rows and cells with <style> elements it
    # writes at run time (templates/interactive/_job_terminal.html); scripts stay 'self'.
    "job_detail": {"style-src": ["'self'", "'unsafe-inline'"]},
}
if PRODUCTION:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = setting("bool", "SECURE_SSL_REDIRECT", True)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = setting("int", "SECURE_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    if DEBUG:
        fail("DEBUG", "must be off in production")
    if not ALLOWED_HOSTS:
        fail("ALLOWED_HOSTS", "must list the host names Gantry is served under in production")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "filters": {"no_4xx_tracebacks": {"()": "core.log_filters.NoTracebackForClientErrors"}},
    "root": {"handlers": ["console"], "level": setting("str", "LOG_LEVEL", "INFO")},
    "loggers": {
        "django.request": {"filters": ["no_4xx_tracebacks"]},
        "django.db.backends": {"level": "WARNING"},
        # One line per proxied notebook request is noise.
        "httpx": {"level": "WARNING"},
        # django-axes announces itself at every start; lockouts are warnings.
        "axes": {"level": "WARNING"},
    },
}
