import logging
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from accounts.models import ApiToken
from core import generations

logger = logging.getLogger(__name__)
User = get_user_model()


# With the shared cache (GANTRY_ACCESS_CACHE), a token and its user are kept there by the
# token's hash, tagged with the "auth" generation, which every committed change to a
# token or a user moves on (accounts.signals; a sign-in's last_login alone does not),
# and the access generation (the token's project). The user's password hash is not kept:
# the cached user has it deferred. Expiry is checked on each use.
TOKEN_TTL = 300
_TOKEN_FIELDS = [f.attname for f in ApiToken._meta.concrete_fields]
_USER_FIELDS = [f.attname for f in User._meta.concrete_fields if f.attname != "password"]
_PROJECT_FIELDS = ["id", "tenant_id"]
_TAGS = ("auth", "access")


def _token_key(key_hash: str) -> str:
    return f"apitoken:1:{key_hash}"


def token_by_hash(key_hash: str) -> ApiToken | None:
    """The unrevoked, unexpired token with this hash, its user and project loaded."""
    shared = settings.GANTRY_ACCESS_CACHE
    if shared:
        current, found = generations.read(_TAGS, _token_key(key_hash))
        entry = found.get(_token_key(key_hash))
        if entry is not None and entry[0] == current:
            return _token_from(entry[1])
    token = ApiToken.objects.active().select_related("user", "project").filter(key_hash=key_hash).first()
    if shared and token is not None and generations.storable(current):
        cache.set(_token_key(key_hash), (current, _entry_of(token)), TOKEN_TTL)
    return token


def remember_token(token: ApiToken) -> None:
    """Keep a token's new last use in its cached entry, if it has a current one."""
    if settings.GANTRY_ACCESS_CACHE:
        current, _ = generations.read(_TAGS)
        if generations.storable(current):
            cache.set(_token_key(token.key_hash), (current, _entry_of(token)), TOKEN_TTL)


def _entry_of(token):
    project = token.project
    return (
        [getattr(token, name) for name in _TOKEN_FIELDS],
        [getattr(token.user, name) for name in _USER_FIELDS],
        [getattr(project, name) for name in _PROJECT_FIELDS] if project else None,
    )


def _token_from(entry) -> ApiToken:
    token_values, user_values, project_values = entry
    token = ApiToken.from_db("default", _TOKEN_FIELDS, token_values)
    token.user = User.from_db("default", _USER_FIELDS, user_values)
    if project_values is not None:
        token.project = ApiToken._meta.get_field("project").related_model.from_db("default", _PROJECT_FIELDS, project_values)
    return token


class ApiTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer gty_…` (or `Token gty_…`): a personal API token.

    `request.auth` is the ApiToken, so permission checks can apply its scope.
    """

    keywords = ("bearer", "token")

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower().decode() not in self.keywords:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Malformed Authorization header.")
        key = header[1].decode(errors="replace")
        if not key.startswith(ApiToken.PREFIX):
            return None  # another scheme's bearer token (e.g. OIDC) may follow
        token = token_by_hash(ApiToken.hash_key(key))
        if token is None or not token.is_active or not token.user.is_active:
            raise exceptions.AuthenticationFailed("Invalid, expired or revoked token.")
        now = timezone.now()
        # Write last-use at most once a minute: a busy client should not write on every call.
        if token.last_used_at is None or now - token.last_used_at > timedelta(minutes=1):
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
            token.last_used_at = now
            remember_token(token)
        return token.user, token

    def authenticate_header(self, request):
        return 'Bearer realm="api"'


class ApiTokenScheme(OpenApiAuthenticationExtension):
    target_class = "accounts.authentication.ApiTokenAuthentication"
    name = "ApiToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "A personal API token (gty_…)."}


class ProviderUnavailable(exceptions.APIException):
    status_code = 503
    default_detail = "The identity provider cannot be reached to check this token."
    default_code = "provider_unavailable"


class OidcBearerAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer <JWT>`: an access token from the single sign-on provider.

    Checked against the provider's JWKS (RS256), issuer, audience (`OIDC_API_AUDIENCE`,
    by default the client id: in Keycloak, an Audience mapper adds it) and expiry. The
    token stands for the Gantry user linked to its `sub`, who must have signed in through
    SSO once; their roles are those of their last sign-in. `request.auth` is the claims.
    """

    def authenticate(self, request):
        from accounts import oidc

        header = authentication.get_authorization_header(request).split()
        if len(header) != 2 or header[0].lower() != b"bearer":
            return None
        token = header[1].decode(errors="replace")
        if token.startswith(ApiToken.PREFIX) or not oidc.is_enabled():
            return None
        client = request.META.get("REMOTE_ADDR")
        try:
            claims = oidc.decode_token(token, audience=oidc.api_audience())
        except oidc.InvalidToken as exc:
            logger.warning("API: refused a bearer token from %s: %s", client, exc)
            raise exceptions.AuthenticationFailed(str(exc)) from None
        except oidc.ProviderUnavailable as exc:
            logger.error("API: cannot check a bearer token: %s", exc)
            raise ProviderUnavailable from None
        user = User.objects.filter(oidc_subject=str(claims["sub"])).first()
        if user is None or not user.is_active:
            logger.warning("API: bearer token from %s for unknown subject %s", client, claims["sub"])
            raise exceptions.AuthenticationFailed(
                "No active Gantry account for this identity: sign in through single sign-on once."
            )
        return user, claims

    def authenticate_header(self, request):
        return 'Bearer realm="api"'


class OidcBearerScheme(OpenApiAuthenticationExtension):
    target_class = "accounts.authentication.OidcBearerAuthentication"
    name = "OidcBearer"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "JWT",
            "description": "An access token from the single sign-on provider (Keycloak).",
        }
