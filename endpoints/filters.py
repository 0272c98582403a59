import django_filters

from endpoints.models import Endpoint
from projects.filters import visible_projects


class EndpointFilterSet(django_filters.FilterSet):
    """The endpoint list's filters, shared by the page and GET /api/v1/endpoints/."""

    q = django_filters.CharFilter(field_name="name", lookup_expr="icontains", label="Search")
    project = django_filters.ModelChoiceFilter(
        queryset=visible_projects, empty_label="All projects"
    )

    class Meta:
        model = Endpoint
        fields = ["q", "project"]
