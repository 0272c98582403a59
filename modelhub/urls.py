from django.urls import path

from modelhub import views

app_name = "modelhub"
urlpatterns = [
    path("models/", views.RegisteredModelListView.as_view(), name="model_list"),
    path(
        "projects/<int:pk>/models/new/", views.RegisteredModelCreateView.as_view(), name="model_add"
    ),
    path("models/<int:pk>/", views.RegisteredModelDetailView.as_view(), name="model_detail"),
    path("models/<int:pk>/edit/", views.RegisteredModelEditView.as_view(), name="model_edit"),
    path("models/<int:pk>/delete/", views.RegisteredModelDeleteView.as_view(), name="model_delete"),
    path("models/<int:pk>/versions/new/", views.VersionUploadView.as_view(), name="version_add"),
    path("models/<int:pk>/aliases/", views.AliasSetView.as_view(), name="alias_set"),
    path("models/<int:pk>/compare/", views.CompareVersionsView.as_view(), name="model_compare"),
    path(
        "jobs/<int:pk>/register-model/",
        views.RegisterFromJobView.as_view(),
        name="register_from_job",
    ),
    path("model-versions/<int:pk>/", views.ModelVersionDetailView.as_view(), name="version_detail"),
    path(
        "model-versions/<int:pk>/download/",
        views.ModelVersionDownloadView.as_view(),
        name="version_download",
    ),
    path("model-versions/<int:pk>/predict/", views.PredictView.as_view(), name="version_predict"),
]
