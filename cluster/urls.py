from django.urls import path

from cluster import views

app_name = "cluster"
urlpatterns = [
    path("cluster/", views.ClusterOverviewView.as_view(), name="overview"),
    path("tenants/<int:pk>/quota/", views.QuotaEditView.as_view(), name="quota_edit"),
]
