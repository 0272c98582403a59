from django.urls import path

from projects import views

app_name = "projects"
urlpatterns = [
    path("projects/", views.ProjectListView.as_view(), name="project_list"),
    path("tenants/<int:pk>/projects/new/", views.ProjectCreateView.as_view(), name="project_add"),
    path("projects/<int:pk>/", views.ProjectDetailView.as_view(), name="project_detail"),
    path("projects/<int:pk>/edit/", views.ProjectEditView.as_view(), name="project_edit"),
    path("projects/<int:pk>/delete/", views.ProjectDeleteView.as_view(), name="project_delete"),
    path("projects/<int:pk>/members/", views.ProjectMembersView.as_view(), name="project_members"),
    path(
        "projects/<int:pk>/members/new/",
        views.ProjectMemberAddView.as_view(),
        name="projectmember_add",
    ),
    path(
        "project-members/<int:pk>/edit/",
        views.ProjectMemberEditView.as_view(),
        name="projectmember_edit",
    ),
    path(
        "project-members/<int:pk>/remove/",
        views.ProjectMemberRemoveView.as_view(),
        name="projectmember_remove",
    ),
]
