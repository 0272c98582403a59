import django_filters
from django.db.models import Q

from datasets.models import Dataset
from projects.filters import visible_projects


class DatasetFilterSet(django_filters.FilterSet):
    """The dataset list's filters, shared by the page and GET /api/v1/datasets/."""

    q = django_filters.CharFilter(method="search", label="Search")
    project = django_filters.ModelChoiceFilter(
        queryset=visible_projects, empty_label="All projects"
    )
    tag = django_filters.CharFilter(method="with_tag", label="Tag")

    class Meta:
        model = Dataset
        fields = ["q", "project", "tag"]

    def search(self, queryset, name, value):
        return queryset.filter(
            Q(name__icontains=value) | Q(slug__icontains=value) | Q(description__icontains=value)
        )

    def with_tag(self, queryset, name, value):
        # JSON `contains` is not available on SQLite; tags are short, a text match is exact
        # enough once quoted.
        return queryset.filter(tags__icontains=f'"{value}"')
