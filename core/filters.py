import django_filters
from django import forms
from django.db.models import Q
from drf_spectacular.utils import extend_schema_field

from core.models import AuditEvent

# The largest id a database column holds (SQLite's driver raises on a bigger one).
MAX_ID = 2**63 - 1


@extend_schema_field({"type": "integer", "minimum": 0})
class IdFilter(django_filters.NumberFilter):
    """An object id: a whole number from 0 that fits the database (`?tenant=1e30` and
    `?tenant=1.5` are a 400 naming the parameter)."""

    field_class = forms.IntegerField

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("min_value", 0)
        kwargs.setdefault("max_value", MAX_ID)
        super().__init__(*args, **kwargs)


class AuditEventFilterSet(django_filters.FilterSet):
    q = django_filters.CharFilter(method="search", label="Search")
    action = django_filters.CharFilter(field_name="action", lookup_expr="startswith")
    tenant = IdFilter(field_name="tenant_id")
    since = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="gte")

    class Meta:
        model = AuditEvent
        fields = ["q", "action", "tenant", "since"]

    def search(self, queryset, name, value):
        return queryset.filter(Q(actor_name__icontains=value) | Q(object_repr__icontains=value))
