from django.urls import path

from accounts import views

app_name = "accounts"
urlpatterns = [
    path("tenants/", views.TenantListView.as_view(), name="tenant_list"),
    path("tenants/new/", views.TenantCreateView.as_view(), name="tenant_add"),
    path("tenants/<int:pk>/", views.TenantDetailView.as_view(), name="tenant_detail"),
    path("tenants/<int:pk>/edit/", views.TenantEditView.as_view(), name="tenant_edit"),
    path("tenants/<int:pk>/delete/", views.TenantDeleteView.as_view(), name="tenant_delete"),
    path("tenants/<int:pk>/members/new/", views.MemberAddView.as_view(), name="member_add"),
    path("memberships/<int:pk>/edit/", views.MemberEditView.as_view(), name="member_edit"),
    path("memberships/<int:pk>/remove/", views.MemberRemoveView.as_view(), name="member_remove"),
    path("settings/tokens/", views.ApiTokenListView.as_view(), name="token_list"),
    path(
        "settings/default-project/",
        views.DefaultProjectView.as_view(),
        name="default_project",
    ),
    path(
        "settings/tokens/<int:pk>/revoke/", views.ApiTokenRevokeView.as_view(), name="token_revoke"
    ),
    path(
        "tenants/<int:pk>/invitations/new/",
        views.InvitationCreateView.as_view(),
        name="invitation_add",
    ),
    path(
        "invitations/<int:pk>/revoke/",
        views.InvitationRevokeView.as_view(),
        name="invitation_revoke",
    ),
    # The emailed link: reachable signed out (its secret is the credential).
    path(
        "invitations/accept/<str:key>/",
        views.InvitationAcceptView.as_view(),
        name="invitation_accept",
    ),
    path("switch-tenant/", views.SwitchTenantView.as_view(), name="switch_tenant"),
]
