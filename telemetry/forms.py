from datetime import timedelta

from django import forms
from django.utils import timezone

from accounts.models import Tenant
from projects.permissions import can
from telemetry.models import IdlePolicy
from telemetry.usage import GROUPS, PERIODS

MAX_DAYS = 366


def report_tenants(user, token=None):
    """Tenants whose usage report the user may read: owners' tenants; every one for lab
    administrators."""
    return [
        t
        for t in Tenant.objects.visible_to(user).order_by("name")
        if can(user, "usage.view", t, token)
    ]


class UsageReportForm(forms.Form):
    """What a usage report covers (the page and the API read the same form)."""

    tenant = forms.ModelChoiceField(queryset=Tenant.objects.none(), required=False)
    group = forms.ChoiceField(choices=[(g, g.title()) for g in GROUPS], initial="project")
    period = forms.ChoiceField(choices=[(p, p.title()) for p in PERIODS], initial="day")
    start = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    end = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))

    def __init__(self, data, *, user, token=None):
        data = data.copy()
        for name in ("group", "period"):
            data.setdefault(name, self.base_fields[name].initial)
        super().__init__(data)
        self.user = user
        self.tenants = report_tenants(user, token)
        self.fields["tenant"].queryset = Tenant.objects.filter(pk__in=[t.pk for t in self.tenants])
        self.fields["tenant"].empty_label = "All my tenants"

    def clean(self):
        data = super().clean()
        # No tenant chosen: every tenant the reader may see the usage of (all, for a lab
        # administrator without a token).
        chosen = data.get("tenant")
        data["tenants"] = [chosen] if chosen else self.tenants
        today = timezone.now().date()
        data["end"] = data.get("end") or today
        data["start"] = data.get("start") or data["end"] - timedelta(days=29)
        if data["start"] > data["end"]:
            self.add_error("end", "The report must end on or after its first day.")
        elif (data["end"] - data["start"]).days >= MAX_DAYS:
            self.add_error("start", f"A report covers at most {MAX_DAYS} days.")
        return data


class IdlePolicyForm(forms.ModelForm):
    class Meta:
        model = IdlePolicy
        fields = ["enabled", "threshold_percent", "idle_minutes", "grace_minutes", "kinds"]
        labels = {
            "threshold_percent": "Idle below (% GPU utilization)",
            "idle_minutes": "For (minutes)",
            "grace_minutes": "Stop after a warning of (minutes)",
            "kinds": "Applies to",
        }
