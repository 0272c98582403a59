from django.urls import reverse

from accounts.models import Tenant
from accounts.views import AddMemberView, ChangeMemberRoleView, RemoveMemberView
from core.views import ObjectDeleteView, ObjectDetailView, ObjectListView, ServiceFormView
from projects import services
from projects.filters import ProjectFilterSet
from projects.forms import ProjectForm, ProjectMemberAddForm, ProjectMemberRoleForm
from projects.models import Project


class ProjectListView(ObjectListView):
    model = Project
    permission_action = "project.view"
    filterset_class = ProjectFilterSet
    template_name = "projects/project_list.html"
    partial_template_name = "projects/_project_table.html"

    def get(self, request, *args, **kwargs):
        # The tenant switcher's choice is the list's tenant filter unless the page names
        # one: the filter then shows which tenant the list holds instead of "All tenants".
        if request.tenant and "tenant" not in request.GET:
            request.GET = request.GET.copy()
            request.GET["tenant"] = str(request.tenant.pk)
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        return super().get_queryset().select_related("tenant")


class ProjectDetailView(ObjectDetailView):
    model = Project
    permission_action = "project.view"
    template_name = "projects/project_detail.html"

    def get_extra_context(self, project):
        # Through the project's reverse relations: projects imports none of the apps above
        # it, and whoever may view the project may view what it holds.
        datasets = project.datasets.order_by("-created_at", "-pk")
        models = project.models.order_by("-updated_at", "-pk")
        return {
            "members": project.members.select_related("user"),
            "dataset_count": datasets.count(),
            "latest_datasets": datasets[:3],
            "model_count": models.count(),
            "latest_models": models[:3],
        }


class ProjectCreateView(ServiceFormView):
    """Create a project in the tenant given by `pk`."""

    model = Tenant
    permission_action = "project.create"
    form_class = ProjectForm
    title = "New project"
    submit_label = "Create project"
    success_message = "Created {object}."

    def perform(self, form, tenant):
        return services.create_project(actor=self.request.user, tenant=tenant, **form.cleaned_data)


class ProjectEditView(ServiceFormView):
    model = Project
    permission_action = "project.change"
    form_class = ProjectForm
    title = "Edit project"
    success_message = "Saved {object}."

    def get_form_kwargs(self, project):
        return {"instance": project}

    def perform(self, form, project):
        return services.update_project(
            actor=self.request.user, project=project, **form.cleaned_data
        )


class ProjectDeleteView(ObjectDeleteView):
    model = Project
    permission_action = "project.delete"

    def get_contents(self, project):
        # Later apps register what a project holds (jobs, datasets, models) here.
        return [(label, count(project)) for label, count in PROJECT_CONTENTS]

    def perform(self, project):
        services.delete_project(actor=self.request.user, project=project)

    def get_success_url(self, project):
        return reverse("accounts:tenant_detail", args=[project.tenant_id])


# (label, function project -> count) for the delete confirmation; apps append to it.
PROJECT_CONTENTS = [
    ("members", lambda project: project.members.count()),
    ("jobs", lambda project: project.jobs.count()),
]


class ProjectMembersView(ObjectDetailView):
    model = Project
    permission_action = "projectmember.view"
    template_name = "projects/project_members.html"

    def get_extra_context(self, project):
        return {
            "members": project.members.select_related("user"),
            "add_form": ProjectMemberAddForm(project=project),
        }


class ProjectMemberAddView(AddMemberView):
    form_class = ProjectMemberAddForm
    title = "Add a project member"
    members = services.PROJECT_MEMBERS

    def get_form_kwargs(self, project):
        return {"project": project}


class ProjectMemberEditView(ChangeMemberRoleView):
    form_class = ProjectMemberRoleForm
    title = "Change project role"
    members = services.PROJECT_MEMBERS


class ProjectMemberRemoveView(RemoveMemberView):
    members = services.PROJECT_MEMBERS
