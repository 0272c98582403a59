"""Accounts: sign-in, single sign-on (OpenID Connect), lockout, email."""

from datetime import timedelta

from config.settings.base import PRODUCTION
from config.settings.env import fail, setting

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
OIDC_OP_ISSUER = setting("str", "OIDC_OP_ISSUER", "").rstrip("/")
OIDC_RP_CLIENT_ID = setting("str", "OIDC_RP_CLIENT_ID", "")
OIDC_RP_CLIENT_SECRET = setting("str", "OIDC_RP_CLIENT_SECRET", "")
_oidc_set = [n for n in ("OIDC_OP_ISSUER", "OIDC_RP_CLIENT_ID", "OIDC_RP_CLIENT_SECRET") if globals()[n]]
if 0 < len(_oidc_set) < 3:
    _missing = {"OIDC_OP_ISSUER", "OIDC_RP_CLIENT_ID", "OIDC_RP_CLIENT_SECRET"} - set(_oidc_set)
    fail(", ".join(sorted(_missing)), f"single sign-on needs it too ({', '.join(_oidc_set)} is set)")
if OIDC_OP_ISSUER and not OIDC_OP_ISSUER.startswith(("https://", "http://")):
    fail("OIDC_OP_ISSUER", "must be the provider's issuer URL, e.g. https://sso.example.org/realms/lab")
if OIDC_OP_ISSUER and PRODUCTION and not OIDC_OP_ISSUER.startswith("https://"):
    fail("OIDC_OP_ISSUER", "must use https:// in production")
OIDC_PROVIDER_NAME = setting("str", "OIDC_PROVIDER_NAME", "Keycloak")
# Audience a bearer access token must carry to reach the API (default: the client id).
OIDC_API_AUDIENCE = setting("str", "OIDC_API_AUDIENCE", "")
OIDC_TIMEOUT = setting("int", "OIDC_TIMEOUT", 10)
OIDC_VERIFY_SSL = setting("bool", "OIDC_VERIFY_SSL", True)
# Groups claim -> roles: {tenant} and {project} are slugs, {role} a tenant or project role.
GANTRY_OIDC_TENANT_GROUP_PATTERN = setting(
    "str", "GANTRY_OIDC_TENANT_GROUP_PATTERN", "/labs/{tenant}/{role}"
)
GANTRY_OIDC_PROJECT_GROUP_PATTERN = setting(
    "str", "GANTRY_OIDC_PROJECT_GROUP_PATTERN", "/labs/{tenant}/projects/{project}/{role}"
)
for _name, _needs in (
    ("GANTRY_OIDC_TENANT_GROUP_PATTERN", ("tenant", "role")),
    ("GANTRY_OIDC_PROJECT_GROUP_PATTERN", ("tenant", "project", "role")),
):
    for _placeholder in _needs:
        if globals()[_name].count("{" + _placeholder + "}") != 1:
            fail(_name, f"must contain {{{_placeholder}}} once, e.g. /labs/{{tenant}}/{{role}}")
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
GANTRY_LOGIN_MAX_FAILURES = setting("int", "GANTRY_LOGIN_MAX_FAILURES", 5)
GANTRY_LOGIN_LOCKOUT_SECONDS = setting("int", "GANTRY_LOGIN_LOCKOUT_SECONDS", 900)
if GANTRY_LOGIN_MAX_FAILURES < 1:
    fail("GANTRY_LOGIN_MAX_FAILURES", "must be at least 1")
if GANTRY_LOGIN_LOCKOUT_SECONDS < 1:
    fail("GANTRY_LOGIN_LOCKOUT_SECONDS", "must be at least 1")
# Proxies in front that append the client's address to X-Forwarded-For (production:
# nginx or the Ingress controller); 0 reads the address of the connection.
GANTRY_TRUSTED_PROXIES = setting("int", "GANTRY_TRUSTED_PROXIES", 1 if PRODUCTION else 0)
if GANTRY_TRUSTED_PROXIES < 0:
    fail("GANTRY_TRUSTED_PROXIES", "must not be negative")
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
EMAIL_BACKEND = setting(
    "str",
    "EMAIL_BACKEND",
    "django.core.mail.backends.smtp.EmailBackend"
    if PRODUCTION
    else "django.core.mail.backends.console.EmailBackend",
)
EMAIL_HOST = setting("str", "EMAIL_HOST", "localhost")
EMAIL_PORT = setting("int", "EMAIL_PORT", 25)
EMAIL_HOST_USER = setting("str", "EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = setting("str", "EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = setting("bool", "EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = setting("int", "EMAIL_TIMEOUT", 10)
DEFAULT_FROM_EMAIL = setting("str", "DEFAULT_FROM_EMAIL", "Gantry <gantry@localhost>")
# How long an invitation link works (days), unless the inviter picks another expiry.
GANTRY_INVITATION_DAYS = setting("int", "GANTRY_INVITATION_DAYS", 7)
if not 1 <= GANTRY_INVITATION_DAYS <= 90:
    fail("GANTRY_INVITATION_DAYS", f"a number of days, 1 to 90, not {GANTRY_INVITATION_DAYS}")
AXES_DISABLE_ACCESS_LOG = True  # successful sign-ins: Gantry's audit log has them
AXES_VERBOSE = False  # a log line per failed sign-in; lockouts are in the audit log
