"""What every page's layout reads: the user's tenants (the tenant switcher) and the current one."""

from accounts.models import Tenant
from projects.permissions import access_of


def gantry(request):
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    if user.is_superuser:
        tenants = Tenant.objects.visible_to(user).values("pk", "name")
    else:  # the user's Access has them: no query
        tenants = [{"pk": pk, "name": name} for pk, name in access_of(user).tenants]
    return {"my_tenants": tenants, "current_tenant": getattr(request, "tenant", None)}
