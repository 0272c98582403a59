from django.urls import path

from notifications import views

app_name = "notifications"
urlpatterns = [
    path(
        "projects/<int:pk>/notifications/",
        views.ProjectSubscriptionsView.as_view(),
        name="project_subscriptions",
    ),
    path(
        "projects/<int:pk>/notifications/thresholds/",
        views.AlertSettingsView.as_view(),
        name="alert_settings",
    ),
    path("settings/notifications/", views.MySubscriptionsView.as_view(), name="my_subscriptions"),
    path(
        "notifications/<int:pk>/",
        views.SubscriptionDetailView.as_view(),
        name="subscription_detail",
    ),
    path(
        "notifications/<int:pk>/delete/",
        views.SubscriptionDeleteView.as_view(),
        name="subscription_delete",
    ),
    path(
        "notifications/confirm/<str:token>/",
        views.SubscriptionConfirmView.as_view(),
        name="subscription_confirm",
    ),
    path(
        "notifications/<int:pk>/test/",
        views.SubscriptionTestView.as_view(),
        name="subscription_test",
    ),
]
