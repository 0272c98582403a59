from django.urls import path

from sweeps import views

app_name = "sweeps"
urlpatterns = [
    path("sweeps/", views.SweepListView.as_view(), name="sweep_list"),
    path("projects/<int:pk>/sweeps/new/", views.SweepCreateView.as_view(), name="sweep_add"),
    path("sweeps/<int:pk>/", views.SweepDetailView.as_view(), name="sweep_detail"),
    path("sweeps/<int:pk>/stop/", views.SweepStopView.as_view(), name="sweep_stop"),
]
