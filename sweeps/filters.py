import django_filters

from projects.filters import visible_projects
from sweeps.models import Sweep, SweepState


class SweepFilterSet(django_filters.FilterSet):
    """The sweep list's filters, shared by the page and GET /api/v1/sweeps/."""

    q = django_filters.CharFilter(field_name="name", lookup_expr="icontains", label="Search")
    project = django_filters.ModelChoiceFilter(queryset=visible_projects, empty_label="All projects")
    state = django_filters.ChoiceFilter(choices=SweepState.choices, empty_label="Any state")

    class Meta:
        model = Sweep
        fields = ["q", "project", "state"]
