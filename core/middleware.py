from accounts.models import Tenant
from core import audit


class CurrentTenantMiddleware:
    """Sets `request.tenant` from the tenant switcher (kept in the session) and notes the
    client address for audit events."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        audit.client_ip.set(request.META.get("REMOTE_ADDR"))
        request.tenant = None
        if request.user.is_authenticated:
            tenant_id = request.session.get("tenant_id")
            if tenant_id:
                request.tenant = (
                    Tenant.objects.visible_to(request.user).filter(pk=tenant_id).first()
                )
        return self.get_response(request)
