from accounts.models import Tenant


def gantry(request):
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {
        "my_tenants": Tenant.objects.visible_to(user).only("id", "name", "slug"),
        "current_tenant": getattr(request, "tenant", None),
    }
