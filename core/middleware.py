from urllib.parse import urlsplit

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.utils.decorators import sync_and_async_middleware

from core import audit


class ClientAddressMiddleware:
    """Notes the client address for audit events (core.audit.client_ip)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        audit.client_ip.set(request.META.get("REMOTE_ADDR"))
        return self.get_response(request)


def content_security_policy(url_name: str | None = None) -> str:
    """GANTRY_CSP as a header value, with the page's GANTRY_CSP_OVERRIDES; sign-in forms
    may also post to the SSO provider."""
    directives = {name: list(sources) for name, sources in settings.GANTRY_CSP.items()}
    directives.update(settings.GANTRY_CSP_OVERRIDES.get(url_name, {}))
    issuer = getattr(settings, "OIDC_OP_ISSUER", "")
    if issuer:
        # RP-initiated logout posts to Gantry, which redirects to the provider:
        # form-action covers the redirects of a form submission.
        parts = urlsplit(issuer)
        directives.setdefault("form-action", []).append(f"{parts.scheme}://{parts.netloc}")
    return "; ".join(f"{name} {' '.join(sources)}" for name, sources in directives.items())


@sync_and_async_middleware
def ContentSecurityPolicyMiddleware(get_response):  # a factory, named as middleware are
    """Adds Content-Security-Policy to every response that has none of its own.

    Views named in GANTRY_CSP_EXEMPT_URL_NAMES get none: the notebook proxy relays
    JupyterLab, which needs inline scripts and sends its own policy.
    """

    def add_header(request, response):
        match = getattr(request, "resolver_match", None)
        url_name = match.url_name if match is not None else None
        if url_name in settings.GANTRY_CSP_EXEMPT_URL_NAMES:
            return response
        if getattr(getattr(response, "accepted_renderer", None), "format", None) == "api":
            url_name = "browsable-api"  # one look, whatever the endpoint
        if "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = content_security_policy(url_name)
        return response

    if iscoroutinefunction(get_response):

        async def middleware(request):
            return add_header(request, await get_response(request))

    else:

        def middleware(request):
            return add_header(request, get_response(request))

    return middleware
