from datetime import timedelta

from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from accounts.models import ApiToken


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
