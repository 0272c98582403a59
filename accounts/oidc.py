"""Single sign-on with an OpenID Connect provider (Keycloak in production).

mozilla-django-oidc runs the authorization-code flow (state, nonce, PKCE). What
Gantry adds, and why:

* Endpoints come from the provider's discovery document
  (`<issuer>/.well-known/openid-configuration`), fetched when first needed and
  cached, so only the issuer, client id and secret are configured, and a
  provider that is down or misconfigured gives a readable error page instead of
  failing start-up or answering 500.
* ID tokens are verified here, not by the library: RS256 against the provider's
  JWKS (cached), plus the `iss` and `aud` (and `azp`) checks the library leaves
  out, and the userinfo answer must be about the same `sub`.
* Users are linked by the provider's `sub` (`User.oidc_subject`), never by a
  matching e-mail address or username alone: a provider account named "admin"
  must not sign in as the local break-glass administrator.
* The `groups` claim becomes tenant and project roles at every sign-in
  (`accounts.services.sync_oidc_user` asks `core.registry.apply_sso_groups`, which
  `projects.sso.apply_groups` answers).

The same JWKS validates OIDC bearer access tokens for the API
(`accounts.authentication.OidcBearerAuthentication`).
"""

from __future__ import annotations

import logging
import threading
import time
from urllib.parse import urlencode

import httpx
import jwt
from django.conf import settings
from django.contrib import auth
from django.core.exceptions import PermissionDenied, SuspiciousOperation, ValidationError
from django.shortcuts import render, resolve_url
from django.urls import reverse
from mozilla_django_oidc import views as oidc_views
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings

from core import audit

logger = logging.getLogger(__name__)

DISCOVERY_TTL_SECONDS = 3600
JWKS_TTL_SECONDS = 300
# A token naming an unknown key refetches the JWKS (keys rotate), but not more often
# than this: forged tokens with random key ids must not hammer the provider.
JWKS_MIN_REFRESH_SECONDS = 30
ALGORITHMS = ["RS256"]
CLOCK_SKEW_SECONDS = 30


class OIDCError(Exception):
    """Single sign-on failed for a reason the person signing in should read (and we log)."""

    status = 400


class SignInRefused(OIDCError):
    """The sign-in was well-formed, but Gantry will not let this identity in."""

    status = 403


class ProviderUnavailable(OIDCError):
    """The identity provider cannot be reached or answers nonsense: a configuration matter."""

    status = 502


class InvalidToken(OIDCError):
    """A JWT (ID token or bearer access token) failed validation."""

    status = 401


def is_enabled() -> bool:
    return bool(
        settings.OIDC_OP_ISSUER and settings.OIDC_RP_CLIENT_ID and settings.OIDC_RP_CLIENT_SECRET
    )


def issuer() -> str:
    return settings.OIDC_OP_ISSUER.rstrip("/")


def api_audience() -> str:
    return settings.OIDC_API_AUDIENCE or settings.OIDC_RP_CLIENT_ID


# --- Discovery and keys -----------------------------------------------------

_lock = threading.Lock()
_discovery: dict[str, tuple[float, dict]] = {}
_jwks: dict[str, tuple[float, dict]] = {}


def _fetch_json(url: str, what: str) -> dict:
    try:
        response = httpx.get(
            url, timeout=settings.OIDC_TIMEOUT, verify=settings.OIDC_VERIFY_SSL, trust_env=False
        )
        response.raise_for_status()
        data = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise ProviderUnavailable(
            f"Could not read the identity provider's {what} at {url}: {exc}"
        ) from exc
    if not isinstance(data, dict):
        raise ProviderUnavailable(f"The identity provider's {what} at {url} is not a JSON object.")
    return data


def provider_metadata() -> dict:
    """The discovery document, checked and cached (per issuer, so tests may switch providers)."""
    iss = issuer()
    with _lock:
        cached = _discovery.get(iss)
        if cached and time.monotonic() - cached[0] < DISCOVERY_TTL_SECONDS:
            return cached[1]
    doc = _fetch_json(f"{iss}/.well-known/openid-configuration", "discovery document")
    if doc.get("issuer") != iss:
        raise ProviderUnavailable(
            f"The discovery document names the issuer {doc.get('issuer')!r}, "
            f"but OIDC_OP_ISSUER is {iss!r}: they must be identical."
        )
    for key in ("authorization_endpoint", "token_endpoint", "userinfo_endpoint", "jwks_uri"):
        if not isinstance(doc.get(key), str) or not doc[key].startswith(("https://", "http://")):
            raise ProviderUnavailable(f"The discovery document has no usable {key}.")
    algs = doc.get("id_token_signing_alg_values_supported") or ALGORITHMS
    if "RS256" not in algs:
        raise ProviderUnavailable("The identity provider does not sign ID tokens with RS256.")
    with _lock:
        _discovery[iss] = (time.monotonic(), doc)
    return doc


def _key_set(force: bool = False) -> dict:
    uri = provider_metadata()["jwks_uri"]
    with _lock:
        cached = _jwks.get(uri)
        if cached:
            age = time.monotonic() - cached[0]
            if age < JWKS_TTL_SECONDS and not (force and age >= JWKS_MIN_REFRESH_SECONDS):
                return cached[1]
    keys = _fetch_json(uri, "key set (JWKS)")
    if not isinstance(keys.get("keys"), list):
        raise ProviderUnavailable(f"The key set at {uri} has no keys.")
    with _lock:
        _jwks[uri] = (time.monotonic(), keys)
    return keys


def forget_provider() -> None:
    """Drop cached discovery documents and keys (tests; a changed configuration)."""
    with _lock:
        _discovery.clear()
        _jwks.clear()


def _signing_key(token: str) -> jwt.PyJWK:
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as exc:
        raise InvalidToken(f"Not a JWT: {exc}") from exc
    if header.get("alg") not in ALGORITHMS:
        raise InvalidToken(f"Token signed with {header.get('alg')!r}; only RS256 is accepted.")
    kid = header.get("kid")
    for force in (False, True):
        for jwk in _key_set(force=force).get("keys", []):
            if jwk.get("use", "sig") != "sig" or jwk.get("kty") != "RSA":
                continue
            if kid is not None and jwk.get("kid") != kid:
                continue
            try:
                return jwt.PyJWK(jwk, algorithm="RS256")
            except jwt.PyJWTError:
                continue
    raise InvalidToken(f"Token signed with a key the provider does not publish (kid {kid!r}).")


def decode_token(token: str, *, audience: str) -> dict:
    """Verify a JWT from the provider: RS256 signature, issuer, audience, expiry.

    Raises InvalidToken (or ProviderUnavailable) with a message fit for a log line.
    """
    key = _signing_key(token)
    try:
        return jwt.decode(
            token,
            key=key,
            algorithms=ALGORITHMS,
            audience=audience,
            issuer=issuer(),
            leeway=CLOCK_SKEW_SECONDS,
            options={"require": ["exp", "iat", "iss", "aud", "sub"]},
        )
    except jwt.ExpiredSignatureError:
        raise InvalidToken("Token has expired.") from None
    except jwt.InvalidAudienceError:
        raise InvalidToken(
            f"Token is not meant for this application (audience is not {audience!r})."
        ) from None
    except jwt.InvalidIssuerError:
        raise InvalidToken(f"Token was not issued by {issuer()}.") from None
    except jwt.PyJWTError as exc:
        raise InvalidToken(f"Token is not valid: {exc}") from exc


# --- The backend -------------------------------------------------------------


class GantryOIDCBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's backend with lazy discovery, full ID token checks and role mapping."""

    def __init__(self, *args, **kwargs):
        # The parent reads endpoint settings here; ours come from discovery, later.
        from django.contrib.auth import get_user_model

        self.UserModel = get_user_model()
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_RP_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = "RS256"
        self.OIDC_RP_IDP_SIGN_KEY = None

    @property
    def OIDC_OP_TOKEN_ENDPOINT(self):  # the parent's attribute names
        return provider_metadata()["token_endpoint"]

    @property
    def OIDC_OP_USER_ENDPOINT(self):
        return provider_metadata()["userinfo_endpoint"]

    @property
    def OIDC_OP_JWKS_ENDPOINT(self):
        return provider_metadata()["jwks_uri"]

    def authenticate(self, request, **kwargs):
        # Only the callback view passes a nonce; a username/password sign-in is not ours.
        if "nonce" not in kwargs or not is_enabled():
            return None
        return super().authenticate(request, **kwargs)

    def verify_token(self, token, **kwargs):
        """The ID token: signature, `iss`, `aud`, `azp`, expiry and nonce."""
        if not token:
            raise OIDCError("The identity provider returned no ID token.")
        client_id = settings.OIDC_RP_CLIENT_ID
        claims = decode_token(token, audience=client_id)
        audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
        # OIDC Core 3.1.3.7: with several audiences, azp must name us; if present, it must be us.
        if (len(audiences) > 1 or "azp" in claims) and claims.get("azp") != client_id:
            raise InvalidToken(
                f"ID token's authorized party {claims.get('azp')!r} is not {client_id!r}."
            )
        if "nonce" in kwargs and claims.get("nonce") != kwargs["nonce"]:
            raise InvalidToken("ID token nonce does not match this sign-in (a replayed token?).")
        return claims

    def get_or_create_user(self, access_token, id_token, payload):
        from accounts import services

        userinfo = self.get_userinfo(access_token, id_token, payload)
        if not isinstance(userinfo, dict) or userinfo.get("sub") != payload.get("sub"):
            raise OIDCError(
                "The provider's userinfo answer is about someone else than the ID token."
            )
        username = userinfo.get("preferred_username") or payload.get("preferred_username")
        if not isinstance(username, str) or not username.strip():
            raise OIDCError(
                "The identity provider sent no preferred_username: add the 'profile' scope to the client."
            )
        try:
            return services.sync_oidc_user(
                subject=str(payload["sub"]),
                username=username.strip()[:150],
                email=str(userinfo.get("email") or "")[:254],
                first_name=str(userinfo.get("given_name") or "")[:150],
                last_name=str(userinfo.get("family_name") or "")[:150],
                groups=userinfo.get("groups", payload.get("groups")),
            )
        except PermissionDenied as exc:
            raise SignInRefused(str(exc)) from exc
        except ValidationError as exc:
            raise OIDCError(" ".join(exc.messages)) from exc


# --- Views ---------------------------------------------------------------------


def sso_error(request, message: str, status: int):
    return render(
        request,
        "registration/sso_error.html",
        {"message": message, "provider_name": settings.OIDC_PROVIDER_NAME},
        status=status,
    )


class OIDCLoginStartView(oidc_views.OIDCAuthenticationRequestView):
    """Sends the browser to the provider. Discovery happens here, on first use."""

    @staticmethod
    def get_settings(attr, *args):
        if attr == "OIDC_OP_AUTHORIZATION_ENDPOINT":
            return None  # from discovery, in get(): the provider may be down right now
        return import_from_settings(attr, *args)

    def get(self, request):
        if not is_enabled():
            return sso_error(request, "Single sign-on is not configured on this Gantry.", 404)
        try:
            self.OIDC_OP_AUTH_ENDPOINT = provider_metadata()["authorization_endpoint"]
        except ProviderUnavailable as exc:
            logger.error("SSO: %s", exc)
            return sso_error(request, _unreachable(), 502)
        return super().get(request)


class OIDCCallbackView(oidc_views.OIDCAuthenticationCallbackView):
    """The provider sends the browser back here. Any failure is a readable page and a log line."""

    def get(self, request):
        if not is_enabled():
            return sso_error(request, "Single sign-on is not configured on this Gantry.", 404)
        if request.GET.get("error"):
            # As the library does: forget the state (no replay) and sign out.
            request.session.get("oidc_states", {}).pop(request.GET.get("state"), None)
            request.session.modified = True
            if request.user.is_authenticated:
                auth.logout(request)
            reason = request.GET.get("error_description") or request.GET["error"]
            return self._failed(f"{settings.OIDC_PROVIDER_NAME} refused the sign-in: {reason}", 403)
        if not ("code" in request.GET and "state" in request.GET):
            return self._failed("The sign-in answer is incomplete (no code or state).", 400)
        if request.GET["state"] not in request.session.get("oidc_states", {}):
            return self._failed(
                "This sign-in link is stale or was opened in another browser. Please start again.",
                400,
            )
        try:
            return super().get(request)
        except ProviderUnavailable as exc:
            logger.error("SSO: %s", exc)
            return self._failed(_unreachable(), 502)
        except OIDCError as exc:
            return self._failed(str(exc), 403 if exc.status == 401 else exc.status)
        except (SuspiciousOperation, httpx.HTTPError, OSError, ValueError, KeyError) as exc:
            # requests' errors are OSErrors; a malformed token answer is a ValueError/KeyError.
            logger.warning("SSO: token exchange failed: %r", exc)
            return self._failed(f"{settings.OIDC_PROVIDER_NAME} did not complete the sign-in.", 502)

    def login_success(self):
        response = super().login_success()  # its success URL was sanitised on the way out
        self.request.session["sso"] = True
        return response

    def login_failure(self):
        user = getattr(self, "user", None)
        if user is not None and not user.is_active:
            return self._failed("Your Gantry account is disabled.", 403)
        return self._failed("The sign-in could not be completed.", 403)

    def _failed(self, message: str, status: int):
        logger.warning(
            "SSO sign-in failed from %s: %s", self.request.META.get("REMOTE_ADDR"), message
        )
        audit.record(None, "auth.login_failed", method="oidc", reason=message[:300])
        return sso_error(self.request, message, status)


def _unreachable() -> str:
    return (
        f"{settings.OIDC_PROVIDER_NAME} cannot be reached right now, or is misconfigured. "
        "Try again later, or sign in with a local account."
    )


def provider_logout_url(request) -> str:
    """OIDC_OP_LOGOUT_URL_METHOD: RP-initiated logout at the provider when the session came from it."""
    after = request.build_absolute_uri(resolve_url(settings.LOGOUT_REDIRECT_URL))
    id_token = request.session.get("oidc_id_token")
    if not (is_enabled() and id_token):
        return resolve_url(settings.LOGOUT_REDIRECT_URL)
    try:
        end_session = provider_metadata().get("end_session_endpoint")
    except ProviderUnavailable as exc:
        logger.warning("SSO logout: %s; signed out of Gantry only", exc)
        return resolve_url(settings.LOGOUT_REDIRECT_URL)
    if not end_session:
        return resolve_url(settings.LOGOUT_REDIRECT_URL)
    query = urlencode(
        {
            "id_token_hint": id_token,
            "post_logout_redirect_uri": after,
            "client_id": settings.OIDC_RP_CLIENT_ID,
        }
    )
    return f"{end_session}{'&' if '?' in end_session else '?'}{query}"


def login_button_context(request) -> dict:
    """What the login page needs to offer single sign-on."""
    if not is_enabled():
        return {}
    url = reverse("oidc_authentication_init")
    next_url = request.GET.get("next") or request.POST.get("next")
    if next_url:
        url += "?" + urlencode({"next": next_url})
    return {"sso_name": settings.OIDC_PROVIDER_NAME, "sso_url": url}
