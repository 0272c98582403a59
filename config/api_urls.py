from django.urls import path

from accounts.api import MeView
from snapshots.api import router as snapshots_router

urlpatterns = [
    path("me/", MeView.as_view(), name="api-me"),
    # Code snapshots: the contract names their paths without a trailing slash.
    *snapshots_router.urls,
]
