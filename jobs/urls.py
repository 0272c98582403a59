from django.urls import path

from jobs import views

app_name = "jobs"
urlpatterns = [
    path("jobs/", views.JobListView.as_view(), name="job_list"),
    path("projects/<int:pk>/jobs/new/", views.JobSubmitView.as_view(), name="job_add"),
    path("jobs/<int:pk>/", views.JobDetailView.as_view(), name="job_detail"),
    path("jobs/<int:pk>/cancel/", views.JobCancelView.as_view(), name="job_cancel"),
    path("jobs/<int:pk>/retry/", views.JobRetryView.as_view(), name="job_retry"),
    path("jobs/<int:pk>/clone/", views.JobCloneView.as_view(), name="job_clone"),
    path("jobs/<int:pk>/log/", views.JobLogDownloadView.as_view(), name="job_log_download"),
    path(
        "projects/<int:pk>/metrics/", views.MetricCompareView.as_view(), name="metric_compare"
    ),
    path(
        "artifacts/<int:pk>/download/",
        views.ArtifactDownloadView.as_view(),
        name="artifact_download",
    ),
]
