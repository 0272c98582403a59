"""The experiment and run pages (the MLflow API's paths are tracking/urls.py)."""

from django.urls import path

from tracking import views

app_name = "tracking"
urlpatterns = [
    path(
        "projects/<int:pk>/experiments/",
        views.ExperimentListView.as_view(),
        name="experiment_list",
    ),
    path("experiments/<int:pk>/", views.ExperimentDetailView.as_view(), name="experiment_detail"),
    path("experiments/<int:pk>/compare/", views.RunCompareView.as_view(), name="run_compare"),
    path("runs/<int:pk>/", views.RunDetailView.as_view(), name="run_detail"),
]
