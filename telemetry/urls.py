from django.urls import path

from telemetry import views

app_name = "telemetry"
urlpatterns = [
    path("usage/gpu/", views.UsageReportView.as_view(), name="usage_report"),
    path("jobs/<int:pk>/gpu.json", views.JobGpuSeriesView.as_view(), name="job_gpu_series"),
    path("projects/<int:pk>/idle-policy/", views.IdlePolicyView.as_view(), name="idle_policy_edit"),
]
