from accounts.models import Tenant


class CurrentTenantMiddleware:
    """Sets `request.tenant` from the tenant switcher (kept in the session)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request.tenant = None
        if request.user.is_authenticated:
            tenant_id = request.session.get("tenant_id")
            if tenant_id:
                request.tenant = (
                    Tenant.objects.visible_to(request.user).filter(pk=tenant_id).first()
                )
        return self.get_response(request)
