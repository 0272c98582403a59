import logging
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from accounts.models import ApiToken

logger = logging.getLogger(__name__)
User = get_user_model()


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
        token = (
            ApiToken.objects.active()
            .select_related("user", "project")
            .filter(key_hash=ApiToken.hash_key(key))
            .first()
        )
        if token is None or not token.user.is_active:
            raise exceptions.AuthenticationFailed("Invalid, expired or revoked token.")
        now = timezone.now()
        # Write last-use at most once a minute: a busy client should not write on every call.
        if token.last_used_at is None or now - token.last_used_at > timedelta(minutes=1):
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
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
