from django.urls import path

from datasets import views

app_name = "datasets"
urlpatterns = [
    path("datasets/", views.DatasetListView.as_view(), name="dataset_list"),
    path("projects/<int:pk>/datasets/new/", views.DatasetCreateView.as_view(), name="dataset_add"),
    path("datasets/<int:pk>/", views.DatasetDetailView.as_view(), name="dataset_detail"),
    path("datasets/<int:pk>/edit/", views.DatasetEditView.as_view(), name="dataset_edit"),
    path("datasets/<int:pk>/delete/", views.DatasetDeleteView.as_view(), name="dataset_delete"),
    path("datasets/<int:pk>/upload/", views.DatasetUploadView.as_view(), name="dataset_upload"),
    path("datasets/<int:pk>/archive/", views.DatasetArchiveView.as_view(), name="dataset_archive"),
    path(
        "datasets/<int:pk>/from-job/", views.DatasetFromJobView.as_view(), name="dataset_from_job"
    ),
    path("dataset-versions/<int:pk>/", views.VersionDetailView.as_view(), name="version_detail"),
    path(
        "dataset-versions/<int:pk>/download/",
        views.VersionDownloadView.as_view(),
        name="version_download",
    ),
    path("dataset-files/<int:pk>/", views.FileDetailView.as_view(), name="file_detail"),
    path(
        "dataset-files/<int:pk>/download/", views.FileDownloadView.as_view(), name="file_download"
    ),
    path("dataset-uploads/<int:pk>/", views.UploadDetailView.as_view(), name="upload_detail"),
    path("dataset-uploads/<int:pk>/abort/", views.UploadAbortView.as_view(), name="upload_abort"),
]
