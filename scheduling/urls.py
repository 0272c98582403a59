from django.urls import path

from scheduling import views

app_name = "scheduling"
urlpatterns = [
    path("cluster/", views.ClusterOverviewView.as_view(), name="overview"),
    path("cluster/queue/", views.ClusterQueueView.as_view(), name="queue"),
    path("tenants/<int:pk>/quota/", views.QuotaEditView.as_view(), name="quota_edit"),
    path("tenants/<int:pk>/queue/", views.TenantQueueView.as_view(), name="tenant_queue"),
]
