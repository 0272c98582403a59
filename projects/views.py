from django.contrib.auth.mixins import LoginRequiredMixin
from django.urls import reverse
from django.views.generic import TemplateView

from accounts.models import Tenant
from accounts.views import AddMemberView, ChangeMemberRoleView, RemoveMemberView
from core.access import AUTHENTICATED
from core.views import ObjectDeleteView, ObjectDetailView, ObjectListView, ServiceFormView
from projects import services
from projects.filters import ProjectFilterSet
from projects.forms import ProjectForm, ProjectMemberAddForm, ProjectMemberRoleForm
from projects.models import Project


class HomeView(LoginRequiredMixin, TemplateView):
    """The dashboard. Needs no object permission: everything on it is `visible_to`."""

    permission_action = AUTHENTICATED
    template_name = "core/home.html"

    def get_context_data(self, **kwargs):
        user = self.request.user
        context = super().get_context_data(**kwargs)
        context["tenants"] = Tenant.objects.visible_to(user)
        projects = Project.objects.visible_to(user).select_related("tenant")
        if self.request.tenant:
            projects = projects.filter(tenant=self.request.tenant)
        context["projects"] = projects[:12]
        return context


class ProjectListView(ObjectListView):
    model = Project
    permission_action = "project.view"
    filterset_class = ProjectFilterSet
    template_name = "projects/project_list.html"
    partial_template_name = "projects/_project_table.html"

    def get_queryset(self):
        queryset = super().get_queryset().select_related("tenant")
        if self.request.tenant and "tenant" not in self.request.GET:
            queryset = queryset.filter(tenant=self.request.tenant)
        return queryset


class ProjectDetailView(ObjectDetailView):
    model = Project
    permission_action = "project.view"
    template_name = "projects/project_detail.html"

    def get_extra_context(self, project):
        return {"members": project.members.select_related("user")}


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
