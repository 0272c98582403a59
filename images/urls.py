from django.urls import path

from images import views

app_name = "images"
urlpatterns = [
    path("images/", views.RuntimeImageListView.as_view(), name="image_list"),
    path("images/registry/", views.RegistryView.as_view(), name="registry"),
    path("tenants/<int:pk>/images/new/", views.RuntimeImageCreateView.as_view(), name="image_add"),
    path("images/<int:pk>/", views.RuntimeImageDetailView.as_view(), name="image_detail"),
    path("images/<int:pk>/edit/", views.RuntimeImageEditView.as_view(), name="image_edit"),
    path("images/<int:pk>/resolve/", views.RuntimeImageResolveView.as_view(), name="image_resolve"),
    path("images/<int:pk>/delete/", views.RuntimeImageDeleteView.as_view(), name="image_delete"),
    path("images/<int:pk>/build/", views.ImageBuildCreateView.as_view(), name="build_add"),
    path("image-builds/<int:pk>/", views.ImageBuildDetailView.as_view(), name="build_detail"),
]
