import django_filters
from django.db.models import Q

from jobs.models import Job, JobKind
from jobs.states import JobState
from projects.filters import visible_projects


class JobFilterSet(django_filters.FilterSet):
    """The job list's filters, shared by the page and GET /api/v1/jobs/."""

    q = django_filters.CharFilter(method="search", label="Search")
    status = django_filters.ChoiceFilter(
        field_name="state", choices=JobState.choices, empty_label="Any status"
    )
    kind = django_filters.ChoiceFilter(choices=JobKind.choices, empty_label="Any kind")
    user = django_filters.CharFilter(field_name="created_by__username", label="User")
    project = django_filters.ModelChoiceFilter(
        queryset=visible_projects, empty_label="All projects"
    )

    class Meta:
        model = Job
        fields = ["q", "status", "kind", "user", "project"]

    def search(self, queryset, name, value):
        query = Q(name__icontains=value) | Q(command__icontains=value)
        if value.lstrip("#").isdigit():
            query |= Q(pk=int(value.lstrip("#")))
        return queryset.filter(query)
