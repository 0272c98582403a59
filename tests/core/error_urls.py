"""Gantry's URLs plus one page that refuses everyone, for the error-page tests."""

from django.core.exceptions import PermissionDenied
from django.urls import path

from config.urls import urlpatterns as gantry_urlpatterns


def forbidden(request):
    raise PermissionDenied("Only the project's owners may delete it.")


urlpatterns = [path("forbidden/", forbidden), *gantry_urlpatterns]
