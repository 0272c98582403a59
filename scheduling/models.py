"""Tenant quotas: what each tenant is entitled to on the cluster (the scheduler's input)."""

from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone

from accounts.models import Tenant


class TenantQuotaQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self.filter(tenant__in=Tenant.objects.visible_to(user))


class TenantQuota(models.Model):
    """What a tenant is entitled to on the cluster.

    `guaranteed_gpus` are the tenant's own: jobs within them are never preempted
    for another tenant. Up to `borrow_limit_gpus` more may be borrowed from idle
    capacity and are reclaimed when their owner needs them (Kueue's cohorts,
    OpenPAI's virtual clusters). Empty CPU, memory and job limits mean no limit.
    A tenant without a row is best-effort: it may borrow idle GPUs only.
    """

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="quota")
    guaranteed_gpus = models.PositiveIntegerField("guaranteed GPUs", default=0)
    borrow_limit_gpus = models.PositiveIntegerField("GPU borrow limit", default=0, help_text="GPUs beyond the guarantee that may be borrowed while idle.")
    max_cpus = models.PositiveIntegerField("max CPUs", null=True, blank=True)
    max_memory_mb = models.PositiveIntegerField("max memory (MiB)", null=True, blank=True)
    max_jobs = models.PositiveIntegerField(null=True, blank=True, help_text="Running jobs at once.")
    weight = models.FloatField(default=1.0, validators=[MinValueValidator(0.01)], help_text="Relative weight in fair sharing.")
    updated_at = models.DateTimeField(default=timezone.now)

    objects = TenantQuotaQuerySet.as_manager()

    class Meta:
        ordering = ["tenant__name"]
        db_table = "cluster_tenantquota"  # moved from the cluster app; the table stays

    def __str__(self):
        return f"Quota of {self.tenant}"

    @property
    def max_gpus(self) -> int:
        return self.guaranteed_gpus + self.borrow_limit_gpus
