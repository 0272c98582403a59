import django_filters
from django.db.models import Q

from accounts.models import ApiToken, Membership, Tenant, TenantRole
from core.filters import IdFilter


class TenantFilterSet(django_filters.FilterSet):
    q = django_filters.CharFilter(method="search", label="Search")

    class Meta:
        model = Tenant
        fields = ["q"]

    def search(self, queryset, name, value):
        return queryset.filter(Q(name__icontains=value) | Q(slug__icontains=value))


class MembershipFilterSet(django_filters.FilterSet):
    q = django_filters.CharFilter(method="search", label="Search")
    role = django_filters.ChoiceFilter(choices=TenantRole.choices)
    tenant = IdFilter(field_name="tenant_id")

    class Meta:
        model = Membership
        fields = ["q", "role", "tenant"]

    def search(self, queryset, name, value):
        return queryset.filter(
            Q(user__username__icontains=value)
            | Q(user__email__icontains=value)
            | Q(user__first_name__icontains=value)
            | Q(user__last_name__icontains=value)
        )


class ApiTokenFilterSet(django_filters.FilterSet):
    active = django_filters.BooleanFilter(method="filter_active", label="Active")

    class Meta:
        model = ApiToken
        fields = ["active"]

    def filter_active(self, queryset, name, value):
        active = ApiToken.objects.active().values("pk")
        return queryset.filter(pk__in=active) if value else queryset.exclude(pk__in=active)
