from django.urls import path

from accounts.api import MeView

urlpatterns = [
    path("me/", MeView.as_view(), name="api-me"),
]
