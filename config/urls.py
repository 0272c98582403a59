from django.contrib import admin
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from mozilla_django_oidc.views import OIDCLogoutView

from accounts.views import GantryLoginView
from config.api import router
from config.views import HomeView
from core.api import api_not_found
from core.views import AuditEventListView, healthz
from tracking.api.server_info import server_info

# MLflow 3's capability answer, which its client reads before uploading artifacts.
mlflow_v3_patterns = [path("mlflow/server-info", server_info, name="mlflow-server-info")]

api_patterns = [
    path("v1/executor/", include("jobs.executor_api")),
    path("v1/executor/", include("tracking.executor_api")),
    path("v1/executor/", include("checkpoints.executor_api")),
    path("v1/", include(router.urls)),
    path("v1/", include("config.api_urls")),
    # The MLflow-compatible tracking API (tracking/): MLflow's own paths and answers.
    path("2.0/", include("tracking.urls")),
    path("3.0/", include(mlflow_v3_patterns)),
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # The split view serves Swagger UI's start-up script as a file: no inline script for CSP.
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
    # Anything else under /api/ answers in JSON, not with the HTML 404 page.
    re_path(r"", api_not_found, name="api-not-found"),
]

urlpatterns = [
    # First, and under one prefix: an API request is matched without trying every page's
    # pattern (70 -> 26 us a request, each failed include raising Resolver404), and a
    # page tries one prefix more.
    path("api/", include(api_patterns)),
    # MLflow serves its REST API under /ajax-api/2.0/ too (its UI and the ajax-only reads,
    # e.g. get-history-bulk-interval): the same views, the same token auth.
    path("ajax-api/2.0/", include("tracking.urls")),
    path("ajax-api/3.0/", include(mlflow_v3_patterns)),
    path("", HomeView.as_view(), name="home"),
    path("healthz", healthz, name="healthz"),
    path("audit/", AuditEventListView.as_view(), name="audit_list"),
    path("accounts/login/", GantryLoginView.as_view(), name="login"),
    # Signs out of the provider too (RP-initiated logout) when the session came from SSO.
    path("accounts/logout/", OIDCLogoutView.as_view(), name="logout"),
    path("oidc/", include("mozilla_django_oidc.urls")),
    path("", include("accounts.urls")),
    path("", include("projects.urls")),
    path("", include("jobs.urls")),
    path("", include("datasets.urls")),
    path("", include("snapshots.urls")),
    path("", include("interactive.urls")),
    path("", include("scheduling.urls")),
    path("", include("images.urls")),
    path("", include("modelhub.urls")),
    path("", include("notifications.urls")),
    path("", include("sweeps.urls")),
    path("", include("checkpoints.urls")),
    path("", include("telemetry.urls")),
    path("", include("endpoints.urls")),
    # The model endpoints' gateway (endpoints/gateway.py): token auth, not pages.
    path("serve/", include("endpoints.serve_urls")),
    path("", include("tracking.page_urls")),
    path("admin/", admin.site.urls),
]
