import django_filters
from django.db.models import Q

from accounts.models import Tenant
from core.filters import IdFilter
from projects.models import Project, ProjectMember, ProjectRole, Visibility
from projects.permissions import restrict, token_of


def visible_projects(request):
    """A project filter's choices (jobs, datasets, models): the projects the user (and the
    API token) reaches."""
    if request is None:
        return Project.objects.none()
    # The labels read tenant/slug (Project.__str__): nothing else is loaded.
    return (
        restrict(Project.objects.all(), request.user, "project.view", token_of(request))
        .select_related("tenant")
        .only("id", "slug", "tenant__slug")
    )


def visible_tenants(request):
    if request is None:
        return Tenant.objects.none()
    return restrict(Tenant.objects.all(), request.user, "tenant.view", token_of(request))


class ProjectFilterSet(django_filters.FilterSet):
    q = django_filters.CharFilter(method="search", label="Search")
    tenant = django_filters.ModelChoiceFilter(queryset=visible_tenants, empty_label="All tenants")
    visibility = django_filters.ChoiceFilter(
        choices=Visibility.choices, empty_label="Any visibility"
    )

    class Meta:
        model = Project
        fields = ["q", "tenant", "visibility"]

    def search(self, queryset, name, value):
        return queryset.filter(
            Q(name__icontains=value) | Q(slug__icontains=value) | Q(description__icontains=value)
        )


class ProjectMemberFilterSet(django_filters.FilterSet):
    role = django_filters.ChoiceFilter(choices=ProjectRole.choices)
    project = IdFilter(field_name="project_id")

    class Meta:
        model = ProjectMember
        fields = ["role", "project"]
