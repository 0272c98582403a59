from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from config.api import router
from core.api import api_not_found
from core.views import AuditEventListView, HomeView, healthz

urlpatterns = [
    path("", HomeView.as_view(), name="home"),
    path("healthz", healthz, name="healthz"),
    path("audit/", AuditEventListView.as_view(), name="audit_list"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include("accounts.urls")),
    path("", include("projects.urls")),
    path("", include("jobs.urls")),
    path("", include("jobs.proxy_urls")),
    path("", include("cluster.urls")),
    path("admin/", admin.site.urls),
    path("api/v1/executor/", include("jobs.executor_api")),
    path("api/v1/", include(router.urls)),
    path("api/v1/", include("config.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    # Anything else under /api/ answers in JSON, not with the HTML 404 page.
    re_path(r"^api/", api_not_found, name="api-not-found"),
]
