import django_filters
from django.db.models import Q

from images.models import Framework, ImageVisibility, RuntimeImage


class RuntimeImageFilterSet(django_filters.FilterSet):
    """The catalog's filters, shared by the page and GET /api/v1/images/."""

    q = django_filters.CharFilter(method="search", label="Search")
    framework = django_filters.ChoiceFilter(choices=Framework.choices, empty_label="Any framework")
    visibility = django_filters.ChoiceFilter(
        choices=ImageVisibility.choices, empty_label="Public and tenant"
    )
    legacy = django_filters.BooleanFilter()

    class Meta:
        model = RuntimeImage
        fields = ["q", "framework", "visibility", "legacy"]

    def search(self, queryset, name, value):
        return queryset.filter(
            Q(name__icontains=value) | Q(repository__icontains=value) | Q(tag__icontains=value)
        )
