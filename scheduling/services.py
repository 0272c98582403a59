"""Quota changes. Lab administrators and tenant admins set them; every change is audited."""

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from core import audit
from jobs.services.holdings import tenant_holdings
from projects.permissions import require
from scheduling.models import TenantQuota

QUOTA_FIELDS = ("guaranteed_gpus", "borrow_limit_gpus", "max_cpus", "max_memory_mb", "max_jobs", "weight")


@transaction.atomic
def set_tenant_quota(*, actor, tenant, **values) -> tuple[TenantQuota, list[str]]:
    """Create or change a tenant's quota. Returns the quota and warnings to show.

    Lowering a quota below what the tenant uses now is allowed (it is how an
    administrator reclaims capacity): running jobs keep running and new ones wait.
    """
    require(actor, "quota.change", tenant)
    unknown = set(values) - set(QUOTA_FIELDS)
    if unknown:
        raise ValidationError({"__all__": f"Unknown quota fields: {', '.join(sorted(unknown))}."})
    for name, value in values.items():
        if value is not None and value < 0:
            raise ValidationError({name: "Must not be negative."})
    if values.get("weight") is not None and values["weight"] <= 0:
        raise ValidationError({"weight": "Must be greater than zero."})
    quota, _ = TenantQuota.objects.select_for_update().get_or_create(tenant=tenant)
    before = {name: getattr(quota, name) for name in QUOTA_FIELDS}
    for name, value in values.items():
        setattr(quota, name, value)
    quota.updated_at = timezone.now()
    quota.full_clean()
    quota.save()
    after = {name: getattr(quota, name) for name in QUOTA_FIELDS}
    audit.record(actor, "quota.change", quota, tenant=tenant, before=before, after=after)

    warnings = []
    usage = tenant_holdings(tenant)
    if usage["gpus"] > quota.max_gpus:
        warnings.append(
            f"{tenant.name} uses {usage['gpus']} GPUs now, more than its new limit of {quota.max_gpus}: "
            "running jobs keep running; new ones wait until usage drops."
        )
    if quota.max_jobs is not None and usage["jobs"] > quota.max_jobs:
        warnings.append(f"{tenant.name} runs {usage['jobs']} jobs now, more than its new limit of {quota.max_jobs}.")
    return quota, warnings
