from django.urls import path

from accounts.api import MeView
from snapshots.api import router as snapshots_router
from telemetry.api import GpuUsageReportView

urlpatterns = [
    path("me/", MeView.as_view(), name="api-me"),
    path("gpu-usage/", GpuUsageReportView.as_view(), name="api-gpu-usage"),
    # Code snapshots: the contract names their paths without a trailing slash.
    *snapshots_router.urls,
]
