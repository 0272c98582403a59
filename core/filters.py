import django_filters
from django.db.models import Q

from core.models import AuditEvent


class AuditEventFilterSet(django_filters.FilterSet):
    q = django_filters.CharFilter(method="search", label="Search")
    action = django_filters.CharFilter(field_name="action", lookup_expr="startswith")
    tenant = django_filters.NumberFilter(field_name="tenant_id")
    since = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="gte")

    class Meta:
        model = AuditEvent
        fields = ["q", "action", "tenant", "since"]

    def search(self, queryset, name, value):
        return queryset.filter(Q(actor_name__icontains=value) | Q(object_repr__icontains=value))
