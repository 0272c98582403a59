from django.urls import path

from endpoints import views

app_name = "endpoints"

urlpatterns = [
    path("endpoints/", views.EndpointListView.as_view(), name="endpoint_list"),
    path("endpoints/<int:pk>/", views.EndpointDetailView.as_view(), name="endpoint_detail"),
    path("endpoints/<int:pk>/delete/", views.EndpointDeleteView.as_view(), name="endpoint_delete"),
    path(
        "endpoints/<int:pk>/tokens/new/",
        views.EndpointTokenCreateView.as_view(),
        name="endpoint_token_create",
    ),
    path(
        "model-versions/<int:pk>/deploy/",
        views.EndpointCreateView.as_view(),
        name="endpoint_create",
    ),
]
