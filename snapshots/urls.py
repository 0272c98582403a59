from django.urls import path

from snapshots import views

app_name = "snapshots"
urlpatterns = [
    path("code/<int:pk>/", views.SnapshotDetailView.as_view(), name="snapshot_detail"),
    path("code/<int:pk>/download/", views.SnapshotDownloadView.as_view(), name="snapshot_download"),
]
