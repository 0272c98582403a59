from django import forms

from scheduling.models import TenantQuota


class TenantQuotaForm(forms.ModelForm):
    class Meta:
        model = TenantQuota
        fields = ["guaranteed_gpus", "borrow_limit_gpus", "max_cpus", "max_memory_mb", "max_jobs", "weight"]
        labels = {"max_memory_mb": "Max memory (MiB)", "max_cpus": "Max CPUs"}
