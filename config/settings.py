"""Gantry settings: every value comes from the environment, with embedded defaults.

With no variables set Gantry runs on one machine with no outside services
(SQLite, files under ./var, django-q's ORM broker, an in-process channel layer).
`DATABASE_URL`, `REDIS_URL`, `GANTRY_STORAGE=s3` and `OIDC_*` move it onto
PostgreSQL, Redis, Ceph and Keycloak.  A malformed value stops start-up with a
message naming the variable (see `_fail`).
"""

import os
from datetime import timedelta
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

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

# Off unless asked for, in development too: Django's debug pages list every URL pattern and
# settings to whoever hits an error. DEBUG=true while working on Gantry itself.
DEBUG = _get("bool", "DEBUG", False)
ALLOWED_HOSTS = _get(
    "list", "ALLOWED_HOSTS", [] if PRODUCTION else ["localhost", "127.0.0.1", "[::1]", "testserver"]
)
CSRF_TRUSTED_ORIGINS = _get("list", "CSRF_TRUSTED_ORIGINS", [])
# The port `manage.py serve` (and so `make run`) listens on, and the address executors and
# the notebook origin use to reach Gantry (jobs run outside the request cycle): by default
# this machine on that address and port, so GANTRY_HOST and GANTRY_PORT alone move both (a
# server listening on every interface is still reached on loopback from this machine).
GANTRY_HOST = _get("str", "GANTRY_HOST", "127.0.0.1")
GANTRY_PORT = _get("int", "GANTRY_PORT", 8000)
if not 0 < GANTRY_PORT < 65536:
    _fail("GANTRY_PORT", f"a TCP port, 1 to 65535, not {GANTRY_PORT}")
_reach_host = {"0.0.0.0": "127.0.0.1", "::": "[::1]", "": "127.0.0.1"}.get(GANTRY_HOST, GANTRY_HOST)
if ":" in _reach_host and not _reach_host.startswith("["):
    _reach_host = f"[{_reach_host}]"
GANTRY_URL = _get("str", "GANTRY_URL", f"http://{_reach_host}:{GANTRY_PORT}").rstrip("/")

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
    "scheduling",
    "images",
    "modelhub",
    "datasets",
    "tracking",
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
DATABASE_URL = _get("str", "DATABASE_URL", "")
if DATABASE_URL:
    try:
        DATABASES = {"default": env.db_url_config(DATABASE_URL)}
    except (ValueError, KeyError, environ.ImproperlyConfigured) as exc:
        _fail("DATABASE_URL", f"{exc}; expected e.g. postgres://user:pass@host:5432/gantry")
    # Under ASGI (websockets, `make run`) every request's sync code runs in a thread of its
    # own: a persistent connection (CONN_MAX_AGE > 0) would stay with that thread, never
    # reused or closed, until PostgreSQL answers "too many clients". So each process keeps
    # a pool (psycopg_pool) of at most DATABASE_POOL_SIZE connections that requests borrow
    # and give back; requests beyond it wait for one. 0 opens one connection per request.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    if DATABASES["default"]["ENGINE"].endswith("postgresql"):
        pool_size = _get("int", "DATABASE_POOL_SIZE", 8)
        if pool_size < 0:
            _fail("DATABASE_POOL_SIZE", "a number of connections, 0 or more")
        if pool_size:
            DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
                "min_size": 1,
                "max_size": pool_size,
                "timeout": _get("int", "DATABASE_POOL_TIMEOUT", 20),
            }
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    # Statements a pooled connection runs often are prepared once (psycopg prepares a
    # statement on its fifth run; it needs server-side parameter binding): PostgreSQL
    # then skips planning them again, a third of a small page's database time. Off
    # behind a pooler in transaction mode (PgBouncer before 1.21), which cannot keep them.
    if DATABASES["default"]["ENGINE"].endswith("postgresql") and _get(
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
REDIS_URL = _get("str", "REDIS_URL", "")
if REDIS_URL and not REDIS_URL.startswith(("redis://", "rediss://", "unix://")):
    _fail("REDIS_URL", "must start with redis://, rediss:// or unix://")
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
            _fail("REDIS_URL", "too few Redis databases below it for this many test workers")
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
    "workers": _get("int", "GANTRY_WORKERS", 2),
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
# django-axes first: it refuses a locked-out username + address before any password check.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]

# --- Single sign-on: OpenID Connect (Keycloak) -------------------------------
# On when the issuer, client id and secret are all set; endpoints and keys come from
# the issuer's discovery document when first needed (accounts/oidc.py).
OIDC_OP_ISSUER = _get("str", "OIDC_OP_ISSUER", "").rstrip("/")
OIDC_RP_CLIENT_ID = _get("str", "OIDC_RP_CLIENT_ID", "")
OIDC_RP_CLIENT_SECRET = _get("str", "OIDC_RP_CLIENT_SECRET", "")
_oidc_set = [n for n in ("OIDC_OP_ISSUER", "OIDC_RP_CLIENT_ID", "OIDC_RP_CLIENT_SECRET") if globals()[n]]
if 0 < len(_oidc_set) < 3:
    _missing = {"OIDC_OP_ISSUER", "OIDC_RP_CLIENT_ID", "OIDC_RP_CLIENT_SECRET"} - set(_oidc_set)
    _fail(", ".join(sorted(_missing)), f"single sign-on needs it too ({', '.join(_oidc_set)} is set)")
if OIDC_OP_ISSUER and not OIDC_OP_ISSUER.startswith(("https://", "http://")):
    _fail("OIDC_OP_ISSUER", "must be the provider's issuer URL, e.g. https://sso.example.org/realms/lab")
if OIDC_OP_ISSUER and PRODUCTION and not OIDC_OP_ISSUER.startswith("https://"):
    _fail("OIDC_OP_ISSUER", "must use https:// in production")
OIDC_PROVIDER_NAME = _get("str", "OIDC_PROVIDER_NAME", "Keycloak")
# Audience a bearer access token must carry to reach the API (default: the client id).
OIDC_API_AUDIENCE = _get("str", "OIDC_API_AUDIENCE", "")
OIDC_TIMEOUT = _get("int", "OIDC_TIMEOUT", 10)
OIDC_VERIFY_SSL = _get("bool", "OIDC_VERIFY_SSL", True)
# Groups claim -> roles: {tenant} and {project} are slugs, {role} a tenant or project role.
GANTRY_OIDC_TENANT_GROUP_PATTERN = _get(
    "str", "GANTRY_OIDC_TENANT_GROUP_PATTERN", "/labs/{tenant}/{role}"
)
GANTRY_OIDC_PROJECT_GROUP_PATTERN = _get(
    "str", "GANTRY_OIDC_PROJECT_GROUP_PATTERN", "/labs/{tenant}/projects/{project}/{role}"
)
# What turns the groups claim into tenant and project roles at each SSO sign-in.
GANTRY_OIDC_GROUPS_HANDLER = "projects.sso.apply_groups"
for _name, _needs in (
    ("GANTRY_OIDC_TENANT_GROUP_PATTERN", ("tenant", "role")),
    ("GANTRY_OIDC_PROJECT_GROUP_PATTERN", ("tenant", "project", "role")),
):
    for _placeholder in _needs:
        if globals()[_name].count("{" + _placeholder + "}") != 1:
            _fail(_name, f"must contain {{{_placeholder}}} once, e.g. /labs/{{tenant}}/{{role}}")
# mozilla-django-oidc: RS256 with the provider's JWKS, PKCE, claims from userinfo.
OIDC_RP_SIGN_ALGO = "RS256"
OIDC_RP_SCOPES = "openid email profile groups"
OIDC_USE_PKCE = True
OIDC_PKCE_CODE_CHALLENGE_METHOD = "S256"
OIDC_STORE_ID_TOKEN = True  # the id_token_hint of RP-initiated logout
OIDC_AUTHENTICATE_CLASS = "accounts.oidc.OIDCLoginStartView"
OIDC_CALLBACK_CLASS = "accounts.oidc.OIDCCallbackView"
OIDC_OP_LOGOUT_URL_METHOD = "accounts.oidc.provider_logout_url"
if OIDC_OP_ISSUER:
    AUTHENTICATION_BACKENDS.append("accounts.oidc.GantryOIDCBackend")

# Sign-in attempts (django-axes, accounts/lockout.py): after this many failures for one
# username from one address, that pair is refused for the lockout period, on every door
# (the sign-in page, the admin). Counted in the database, so every process agrees.
GANTRY_LOGIN_MAX_FAILURES = _get("int", "GANTRY_LOGIN_MAX_FAILURES", 5)
GANTRY_LOGIN_LOCKOUT_SECONDS = _get("int", "GANTRY_LOGIN_LOCKOUT_SECONDS", 900)
if GANTRY_LOGIN_MAX_FAILURES < 1:
    _fail("GANTRY_LOGIN_MAX_FAILURES", "must be at least 1")
if GANTRY_LOGIN_LOCKOUT_SECONDS < 1:
    _fail("GANTRY_LOGIN_LOCKOUT_SECONDS", "must be at least 1")
# Proxies in front that append the client's address to X-Forwarded-For (production:
# nginx or the Ingress controller); 0 reads the address of the connection.
GANTRY_TRUSTED_PROXIES = _get("int", "GANTRY_TRUSTED_PROXIES", 1 if PRODUCTION else 0)
if GANTRY_TRUSTED_PROXIES < 0:
    _fail("GANTRY_TRUSTED_PROXIES", "must not be negative")
AXES_HANDLER = "axes.handlers.database.AxesDatabaseHandler"
AXES_FAILURE_LIMIT = GANTRY_LOGIN_MAX_FAILURES
AXES_COOLOFF_TIME = timedelta(seconds=GANTRY_LOGIN_LOCKOUT_SECONDS)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_USERNAME_CALLABLE = "accounts.lockout.username"
AXES_CLIENT_IP_CALLABLE = "accounts.lockout.client_ip"
AXES_LOCKOUT_CALLABLE = "accounts.lockout.lockout_response"

# --- Email (invitations, accounts/invitations.py) --------------------------------
# Development prints mail on the server's console; production sends through SMTP.
EMAIL_BACKEND = _get(
    "str",
    "EMAIL_BACKEND",
    "django.core.mail.backends.smtp.EmailBackend"
    if PRODUCTION
    else "django.core.mail.backends.console.EmailBackend",
)
EMAIL_HOST = _get("str", "EMAIL_HOST", "localhost")
EMAIL_PORT = _get("int", "EMAIL_PORT", 25)
EMAIL_HOST_USER = _get("str", "EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = _get("str", "EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = _get("bool", "EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = _get("int", "EMAIL_TIMEOUT", 10)
DEFAULT_FROM_EMAIL = _get("str", "DEFAULT_FROM_EMAIL", "Gantry <gantry@localhost>")
# How long an invitation link works (days), unless the inviter picks another expiry.
GANTRY_INVITATION_DAYS = _get("int", "GANTRY_INVITATION_DAYS", 7)
if not 1 <= GANTRY_INVITATION_DAYS <= 90:
    _fail("GANTRY_INVITATION_DAYS", f"a number of days, 1 to 90, not {GANTRY_INVITATION_DAYS}")
# The service that grants an invitation's project role: accounts sits below projects.
GANTRY_PROJECT_MEMBERS = "projects.services.PROJECT_MEMBERS"
AXES_DISABLE_ACCESS_LOG = True  # successful sign-ins: Gantry's audit log has them
AXES_VERBOSE = False  # a log line per failed sign-in; lockouts are in the audit log

# --- Files ---------------------------------------------------------------
STATIC_URL = "/static/"
# Where `collectstatic` puts the files production serves (WhiteNoise, or nginx: platform/nginx/).
STATIC_ROOT = Path(_get("str", "GANTRY_STATIC_ROOT", str(BASE_DIR / "staticfiles"))).resolve()
STATICFILES_DIRS = [BASE_DIR / "static"]
MEDIA_ROOT = DATA_DIR / "files"
MEDIA_URL = "/files/"
# Development serves static files straight from the source folders; production
# runs `collectstatic` (compressed, hashed names) and WhiteNoise serves the result.
WHITENOISE_USE_FINDERS = not PRODUCTION
# Files browsers ask for at the site's root (favicon.ico), served as they are.
WHITENOISE_ROOT = BASE_DIR / "core" / "root"
WHITENOISE_AUTOREFRESH = not PRODUCTION
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
}
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
    "filters": {"no_4xx_tracebacks": {"()": "core.log_filters.NoTracebackForClientErrors"}},
    "root": {"handlers": ["console"], "level": _get("str", "LOG_LEVEL", "INFO")},
    "loggers": {
        "django.request": {"filters": ["no_4xx_tracebacks"]},
        "django.db.backends": {"level": "WARNING"},
        # One line per proxied notebook request is noise.
        "httpx": {"level": "WARNING"},
        # django-axes announces itself at every start; lockouts are warnings.
        "axes": {"level": "WARNING"},
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
# Test-only, deliberately not read from the environment: the local backend reports this
# many GPUs (indices 0…n-1) instead of the detected ones, for admission's bookkeeping on
# machines without GPUs. Nothing checks that a device exists; jobs see the indices in
# CUDA_VISIBLE_DEVICES. Tests set it with the `settings` fixture.
GANTRY_LOCAL_FAKE_GPUS = 0
# Local jobs run in a bubblewrap sandbox (jobs/backends/sandbox.py): "auto" uses it when
# this machine can, "required" refuses to start without it (system check error), "off"
# never uses it (then jobs of a second tenant are refused, unless the switch below).
GANTRY_SANDBOX = _get("str", "GANTRY_SANDBOX", "auto")
if GANTRY_SANDBOX not in ("auto", "required", "off"):
    _fail("GANTRY_SANDBOX", f"must be auto, required or off, not {GANTRY_SANDBOX!r}")
GANTRY_ALLOW_UNISOLATED_JOBS = _get("bool", "GANTRY_ALLOW_UNISOLATED_JOBS", False)
# Sandboxed jobs run as uid/gid BASE + (job id mod COUNT): not Gantry's, not a login user's.
GANTRY_SANDBOX_UID_BASE = _get("int", "GANTRY_SANDBOX_UID_BASE", 200_000)
GANTRY_SANDBOX_UID_COUNT = _get("int", "GANTRY_SANDBOX_UID_COUNT", 65_536)
if GANTRY_SANDBOX_UID_BASE < 1000 or GANTRY_SANDBOX_UID_COUNT < 1:
    _fail("GANTRY_SANDBOX_UID_BASE", "must be 1000 or more, with a COUNT of 1 or more")
# Host directories every sandboxed job may read (shared code, a lab's datasets on NFS…),
# besides its runtime. Never Gantry's checkout or data directory (a system check says so).
GANTRY_JOB_READ_ONLY_PATHS = _get(
    "list", "GANTRY_JOB_READ_ONLY_PATHS", [str(BASE_DIR / "examples")]
)
GANTRY_HEARTBEAT_SECONDS = _get("float", "GANTRY_HEARTBEAT_SECONDS", 5.0)
# Kicked admission passes (after submits, cancels, finished jobs) start at most this often.
GANTRY_ADMISSION_KICK_SECONDS = _get("float", "GANTRY_ADMISSION_KICK_SECONDS", 1.0)
# How often an open live-log socket re-checks that its user may still see the job.
GANTRY_WS_RECHECK_SECONDS = _get("float", "GANTRY_WS_RECHECK_SECONDS", 10.0)
# Each user's roles and visible projects, read on nearly every request, are kept in the
# shared cache between requests (projects.permissions.access_of). Only with Redis: a
# per-process cache would not hear of changes made in other processes.
GANTRY_ACCESS_CACHE = _get("bool", "GANTRY_ACCESS_CACHE", bool(REDIS_URL))
# The module holding the permission matrix, which core's base views and API classes ask
# (core.access): core sits below projects and cannot import it.
GANTRY_ACCESS_POLICY = "projects.permissions"
if GANTRY_ACCESS_CACHE and not REDIS_URL:
    _fail("GANTRY_ACCESS_CACHE", "needs REDIS_URL (a cache every process shares)")
GANTRY_HEARTBEAT_TIMEOUT_SECONDS = _get("int", "GANTRY_HEARTBEAT_TIMEOUT_SECONDS", 30)
GANTRY_JOB_GRACE_SECONDS = _get("int", "GANTRY_JOB_GRACE_SECONDS", 10)
GANTRY_EXECUTOR_FINAL_FLUSH_SECONDS = _get("int", "GANTRY_EXECUTOR_FINAL_FLUSH_SECONDS", 300)
# A job token keeps working this long after the job ended, so final logs and outputs flush.
GANTRY_JOB_TOKEN_GRACE_MINUTES = _get("int", "GANTRY_JOB_TOKEN_GRACE_MINUTES", 10)
GANTRY_NOTEBOOK_IDLE_MINUTES = _get("int", "GANTRY_NOTEBOOK_IDLE_MINUTES", 120)
# Notebooks are served from an origin of their own, one host per job, so that Gantry's
# cookies never reach what a notebook shows (jobs/notebook_origin.py). `{job}` stands for
# the job's id. The default: browsers resolve *.localhost to this machine by themselves,
# and Gantry's cookies of 127.0.0.1 are never sent to <id>.nb.localhost.
GANTRY_NOTEBOOK_PORT = _get("int", "GANTRY_NOTEBOOK_PORT", 8001)
if not 0 < GANTRY_NOTEBOOK_PORT < 65536:
    _fail("GANTRY_NOTEBOOK_PORT", f"a TCP port, 1 to 65535, not {GANTRY_NOTEBOOK_PORT}")
GANTRY_NOTEBOOK_ORIGIN = _get(
    "str", "GANTRY_NOTEBOOK_ORIGIN", f"http://{{job}}.nb.localhost:{GANTRY_NOTEBOOK_PORT}"
).rstrip("/")
_nb_origin = GANTRY_NOTEBOOK_ORIGIN.split("://", 1)
if (
    len(_nb_origin) != 2
    or _nb_origin[0] not in ("http", "https")
    or "/" in _nb_origin[1]
    or _nb_origin[1].count("{job}") != 1
    or not _nb_origin[1].startswith("{job}.")
    or "{" in _nb_origin[1].replace("{job}", "", 1)
):
    _fail(
        "GANTRY_NOTEBOOK_ORIGIN",
        "an origin whose host starts with a {job} label, such as https://{job}.nb.lab.example "
        f"(no path), not {GANTRY_NOTEBOOK_ORIGIN!r}",
    )
# A notebook request that gets no answer in this many seconds answers 504 (kernels and
# terminals talk over websockets, which have no such limit).
GANTRY_NOTEBOOK_TIMEOUT_SECONDS = _get("float", "GANTRY_NOTEBOOK_TIMEOUT_SECONDS", 10.0)
if GANTRY_NOTEBOOK_TIMEOUT_SECONDS <= 0:
    _fail("GANTRY_NOTEBOOK_TIMEOUT_SECONDS", "a number of seconds above 0")
GANTRY_JOB_WORKDIR_RETENTION_HOURS = _get("int", "GANTRY_JOB_WORKDIR_RETENTION_HOURS", 72)
for _name in ("GANTRY_LOCAL_CPUS", "GANTRY_LOCAL_MEMORY_MB", "GANTRY_HEARTBEAT_TIMEOUT_SECONDS"):
    if globals()[_name] < 0:
        _fail(_name, "must not be negative")

# --- Runtime images: the OCI registry Gantry browses and pushes custom images to ----
GANTRY_REGISTRY_URL = _get("str", "GANTRY_REGISTRY_URL", "").rstrip("/")
if GANTRY_REGISTRY_URL and not GANTRY_REGISTRY_URL.startswith(("http://", "https://")):
    _fail("GANTRY_REGISTRY_URL", "must start with http:// or https://")
GANTRY_REGISTRY_USERNAME = _get("str", "GANTRY_REGISTRY_USERNAME", "")
GANTRY_REGISTRY_PASSWORD = _get("str", "GANTRY_REGISTRY_PASSWORD", "")
GANTRY_REGISTRY_VERIFY_TLS = _get("bool", "GANTRY_REGISTRY_VERIFY_TLS", True)
GANTRY_REGISTRY_TIMEOUT_SECONDS = _get("float", "GANTRY_REGISTRY_TIMEOUT_SECONDS", 15.0)
# Custom image builds: pip runs here (never inside the image), so only pure-Python wheels.
GANTRY_PIP_INDEX_URL = _get("str", "GANTRY_PIP_INDEX_URL", "")
GANTRY_PIP_FIND_LINKS = _get("str", "GANTRY_PIP_FIND_LINKS", "")
GANTRY_PIP_NO_INDEX = _get("bool", "GANTRY_PIP_NO_INDEX", False)

# --- Kubernetes backend (GANTRY_JOB_BACKEND=kubernetes) --------------------------------
# Clusters are registered in the admin (cluster.KubernetesCluster); with none registered,
# the backend uses $KUBECONFIG, or the in-cluster service account when it runs in a pod.
# The model is named here, as AUTH_USER_MODEL is, because jobs never imports cluster.
GANTRY_K8S_CLUSTER_MODEL = "cluster.KubernetesCluster"
# API creates of admitted jobs run in this many threads at once (one client each).
GANTRY_K8S_LAUNCH_CONCURRENCY = _get("int", "GANTRY_K8S_LAUNCH_CONCURRENCY", 16)
GANTRY_K8S_DEFAULT_IMAGE = _get("str", "GANTRY_K8S_DEFAULT_IMAGE", "gantry/pytorch:latest")
# The address executors inside the cluster use to reach Gantry (often a Service name).
GANTRY_K8S_API_URL = _get("str", "GANTRY_K8S_API_URL", GANTRY_URL).rstrip("/")
# The namespace Gantry itself runs in: only it may reach notebook pods (NetworkPolicy).
GANTRY_K8S_PLATFORM_NAMESPACE = _get("str", "GANTRY_K8S_PLATFORM_NAMESPACE", "gantry")
# GPU model -> node selector, e.g. {"A100": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}};
# a model not listed selects nodes whose nvidia.com/gpu.product label equals it.
GANTRY_K8S_GPU_NODE_SELECTORS = _get("json", "GANTRY_K8S_GPU_NODE_SELECTORS", {})
# Tolerations given to GPU pods (GPU nodes are usually tainted).
GANTRY_K8S_GPU_TOLERATIONS = _get(
    "json",
    "GANTRY_K8S_GPU_TOLERATIONS",
    [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
)
GANTRY_K8S_IMAGE_PULL_SECRETS = _get("list", "GANTRY_K8S_IMAGE_PULL_SECRETS", [])
GANTRY_K8S_TTL_SECONDS_AFTER_FINISHED = _get("int", "GANTRY_K8S_TTL_SECONDS_AFTER_FINISHED", 3600)
GANTRY_K8S_MASTER_PORT = _get("int", "GANTRY_K8S_MASTER_PORT", 29500)
GANTRY_K8S_NOTEBOOK_PORT = _get("int", "GANTRY_K8S_NOTEBOOK_PORT", 8888)
# A pod no node can take for this long fails its attempt ("no node can run it: …").
GANTRY_K8S_UNSCHEDULABLE_SECONDS = _get("int", "GANTRY_K8S_UNSCHEDULABLE_SECONDS", 600)
GANTRY_K8S_API_TIMEOUT_SECONDS = _get("float", "GANTRY_K8S_API_TIMEOUT_SECONDS", 10.0)
# Optional GPU utilization source on Kubernetes: a Prometheus scraping NVIDIA's DCGM exporter.
GANTRY_PROMETHEUS_URL = _get("str", "GANTRY_PROMETHEUS_URL", "").rstrip("/")
if not isinstance(GANTRY_K8S_GPU_NODE_SELECTORS, dict) or not all(
    isinstance(v, dict) for v in GANTRY_K8S_GPU_NODE_SELECTORS.values()
):
    _fail("GANTRY_K8S_GPU_NODE_SELECTORS", "must be a JSON object of model -> {label: value}")
if not 1 <= GANTRY_K8S_LAUNCH_CONCURRENCY <= 256:
    _fail("GANTRY_K8S_LAUNCH_CONCURRENCY", "threads creating Kubernetes objects, 1 to 256")
if not isinstance(GANTRY_K8S_GPU_TOLERATIONS, list):
    _fail("GANTRY_K8S_GPU_TOLERATIONS", "must be a JSON list of Kubernetes tolerations")

# --- Datasets ------------------------------------------------------------
# Per-tenant storage for datasets when the tenant has no datasets.StorageQuota row.
GANTRY_TENANT_STORAGE_QUOTA_GB = _get("float", "GANTRY_TENANT_STORAGE_QUOTA_GB", 100.0)
GANTRY_UPLOAD_PART_MB = _get("int", "GANTRY_UPLOAD_PART_MB", 16)
# An upload with no activity for this long is aborted and its parts deleted.
GANTRY_UPLOAD_EXPIRY_HOURS = _get("int", "GANTRY_UPLOAD_EXPIRY_HOURS", 24)
GANTRY_ARCHIVE_MAX_BYTES = _get("int", "GANTRY_ARCHIVE_MAX_BYTES", 50 * 1024**3)
GANTRY_ARCHIVE_MAX_FILES = _get("int", "GANTRY_ARCHIVE_MAX_FILES", 200_000)
GANTRY_ARCHIVE_MAX_RATIO = _get("int", "GANTRY_ARCHIVE_MAX_RATIO", 200)
# Bucket prefixes (comma-separated) whose objects may be imported as a dataset version;
# empty turns the feature off.
GANTRY_DATASET_IMPORT_PREFIXES = _get("str", "GANTRY_DATASET_IMPORT_PREFIXES", "")
if GANTRY_UPLOAD_PART_MB < 5:
    _fail("GANTRY_UPLOAD_PART_MB", "must be at least 5 (the S3 minimum part size)")
