import django_filters
from django.db.models import Q

from modelhub.models import RegisteredModel
from projects.filters import visible_projects


class RegisteredModelFilterSet(django_filters.FilterSet):
    """The model list's filters, shared by the page and GET /api/v1/models/."""

    q = django_filters.CharFilter(method="search", label="Search")
    project = django_filters.ModelChoiceFilter(
        queryset=visible_projects, empty_label="All projects"
    )
    tag = django_filters.CharFilter(method="with_tag", label="Tag")

    class Meta:
        model = RegisteredModel
        fields = ["q", "project", "tag"]

    def search(self, queryset, name, value):
        return queryset.filter(Q(name__icontains=value) | Q(description__icontains=value))

    def with_tag(self, queryset, name, value):
        # JSON containment is not on SQLite; tags are short lists, so match the JSON text.
        return queryset.filter(tags__icontains=f'"{value}"')
