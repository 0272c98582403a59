from django.urls import path

from checkpoints import views

app_name = "checkpoints"
urlpatterns = [
    path("jobs/<int:pk>/checkpoints/", views.JobCheckpointsView.as_view(), name="job_checkpoints"),
    path(
        "checkpoints/<int:pk>/register/",
        views.CheckpointRegisterView.as_view(),
        name="checkpoint_register",
    ),
    path(
        "checkpoints/<int:pk>/new-job/", views.CheckpointResumeView.as_view(), name="checkpoint_resume"
    ),
]
