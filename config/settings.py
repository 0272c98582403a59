"""Gantry settings: every value comes from the environment, with embedded defaults.

With no variables set Gantry runs on one machine with no outside services
(SQLite, files under ./var, django-q's ORM broker, an in-process channel layer).
`DATABASE_URL`, `REDIS_URL`, `GANTRY_STORAGE=s3` and `OIDC_*` move it onto
PostgreSQL, Redis, Ceph and Keycloak.  A malformed value stops start-up with a
message naming the variable (see `_fail`).
"""

import os
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()


def _fail(name: str, problem: str):
    raise ImproperlyConfigured(f"Configuration error in {name}: {problem}")


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _get(kind, name, default):
    if kind == "bool":
        # django-environ reads any unknown word as False; a typo must not turn a switch off.
        raw = env.str(name, default=None)
        if raw is None:
            return default
        if raw.strip().lower() in _TRUE:
            return True
        if raw.strip().lower() in _FALSE:
            return False
        _fail(name, f"expected true or false, got {raw!r}")
    try:
        return getattr(env, kind)(name, default=default)
    except (ValueError, environ.ImproperlyConfigured) as exc:
        _fail(name, f"{exc} (got {env.str(name, default='')!r})")


GANTRY_ENV = _get("str", "GANTRY_ENV", "development")
if GANTRY_ENV not in ("development", "production", "test"):
    _fail("GANTRY_ENV", f"must be development, production or test, not {GANTRY_ENV!r}")
PRODUCTION = GANTRY_ENV == "production"

DATA_DIR = Path(_get("str", "GANTRY_DATA_DIR", str(BASE_DIR / "var"))).resolve()

SECRET_KEY = _get("str", "SECRET_KEY", "")
if not SECRET_KEY:
    if PRODUCTION:
        _fail("SECRET_KEY", "must be set in production (50+ random characters)")
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

DEBUG = _get("bool", "DEBUG", not PRODUCTION)
ALLOWED_HOSTS = _get(
    "list", "ALLOWED_HOSTS", [] if PRODUCTION else ["localhost", "127.0.0.1", "[::1]", "testserver"]
)
CSRF_TRUSTED_ORIGINS = _get("list", "CSRF_TRUSTED_ORIGINS", [])
# The address executors use to reach the API (jobs run outside the request cycle).
GANTRY_URL = _get("str", "GANTRY_URL", "http://127.0.0.1:8000").rstrip("/")

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
    "core",
    "accounts",
    "projects",
    "cluster",
    "jobs",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "core.middleware.CurrentTenantMiddleware",
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
                "core.context_processors.gantry",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------
DATABASE_URL = _get("str", "DATABASE_URL", "")
if DATABASE_URL:
    try:
        DATABASES = {"default": env.db_url_config(DATABASE_URL)}
    except (ValueError, KeyError, environ.ImproperlyConfigured) as exc:
        _fail("DATABASE_URL", f"{exc}; expected e.g. postgres://user:pass@host:5432/gantry")
    DATABASES["default"].setdefault("CONN_MAX_AGE", 60)
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
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
REDIS_URL = _get("str", "REDIS_URL", "")
if REDIS_URL and not REDIS_URL.startswith(("redis://", "rediss://", "unix://")):
    _fail("REDIS_URL", "must start with redis://, rediss:// or unix://")

if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        }
    }
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

Q_CLUSTER = {
    "name": "gantry",
    "workers": _get("int", "GANTRY_WORKERS", 2),
    "timeout": 600,
    "retry": 660,
    "max_attempts": 1,
    "catch_up": False,
    "poll": 0.5,
    "label": "Background tasks",
}
if REDIS_URL:
    Q_CLUSTER["redis"] = REDIS_URL
else:
    Q_CLUSTER["orm"] = "default"

# --- Auth ----------------------------------------------------------------
AUTH_USER_MODEL = "accounts.User"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
AUTHENTICATION_BACKENDS = ["django.contrib.auth.backends.ModelBackend"]

# --- Files ---------------------------------------------------------------
STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
MEDIA_ROOT = DATA_DIR / "files"
MEDIA_URL = "/files/"
# Development serves static files straight from the source folders; production
# runs `collectstatic` (compressed, hashed names) and WhiteNoise serves the result.
WHITENOISE_USE_FINDERS = DEBUG
WHITENOISE_AUTOREFRESH = DEBUG
GANTRY_STORAGE = _get("str", "GANTRY_STORAGE", "filesystem")
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
            "endpoint_url": _get("str", "S3_ENDPOINT_URL", None),
            "bucket_name": _get("str", "S3_BUCKET", "gantry"),
            "access_key": _get("str", "S3_ACCESS_KEY_ID", None),
            "secret_key": _get("str", "S3_SECRET_ACCESS_KEY", None),
            "region_name": _get("str", "S3_REGION", "us-east-1"),
            "addressing_style": "path",
            "signature_version": "s3v4",
            "file_overwrite": False,
            "default_acl": None,
        },
    }
else:
    _fail("GANTRY_STORAGE", f"must be filesystem or s3, not {GANTRY_STORAGE!r}")
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
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["core.api.MatrixPermission"],
    "DEFAULT_PAGINATION_CLASS": "core.api.Pagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
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
    },
}

# --- i18n ----------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = _get("str", "TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

# --- Security ------------------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # HTMX reads the token from the page, not the cookie
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024 * 1024
if PRODUCTION:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = _get("bool", "SECURE_SSL_REDIRECT", True)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = _get("int", "SECURE_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    if DEBUG:
        _fail("DEBUG", "must be off in production")
    if not ALLOWED_HOSTS:
        _fail("ALLOWED_HOSTS", "must list the host names Gantry is served under in production")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": _get("str", "LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # One line per proxied notebook request is noise.
        "httpx": {"level": "WARNING"},
    },
}

# --- Gantry --------------------------------------------------------------
GANTRY_DEMO_PASSWORD = _get("str", "GANTRY_DEMO_PASSWORD", "gantry-demo")

# --- Jobs ----------------------------------------------------------------
GANTRY_JOB_BACKEND = _get("str", "GANTRY_JOB_BACKEND", "local")
GANTRY_JOBS_DIR = Path(_get("str", "GANTRY_JOBS_DIR", str(DATA_DIR / "jobs"))).resolve()
# Local backend capacity; 0 = what the machine has (CI overrides it on small runners).
GANTRY_LOCAL_CPUS = _get("int", "GANTRY_LOCAL_CPUS", 0)
GANTRY_LOCAL_MEMORY_MB = _get("int", "GANTRY_LOCAL_MEMORY_MB", 0)
GANTRY_HEARTBEAT_SECONDS = _get("float", "GANTRY_HEARTBEAT_SECONDS", 5.0)
GANTRY_HEARTBEAT_TIMEOUT_SECONDS = _get("int", "GANTRY_HEARTBEAT_TIMEOUT_SECONDS", 30)
GANTRY_JOB_GRACE_SECONDS = _get("int", "GANTRY_JOB_GRACE_SECONDS", 10)
GANTRY_EXECUTOR_FINAL_FLUSH_SECONDS = _get("int", "GANTRY_EXECUTOR_FINAL_FLUSH_SECONDS", 300)
# A job token keeps working this long after the job ended, so final logs and outputs flush.
GANTRY_JOB_TOKEN_GRACE_MINUTES = _get("int", "GANTRY_JOB_TOKEN_GRACE_MINUTES", 10)
GANTRY_NOTEBOOK_IDLE_MINUTES = _get("int", "GANTRY_NOTEBOOK_IDLE_MINUTES", 120)
GANTRY_JOB_WORKDIR_RETENTION_HOURS = _get("int", "GANTRY_JOB_WORKDIR_RETENTION_HOURS", 72)
for _name in ("GANTRY_LOCAL_CPUS", "GANTRY_LOCAL_MEMORY_MB", "GANTRY_HEARTBEAT_TIMEOUT_SECONDS"):
    if globals()[_name] < 0:
        _fail(_name, "must not be negative")
