"""Pages: a project's subscriptions (maintainers), the user's own, and one subscription
with its delivery log."""

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views import View

from core.views import GantryView, ServiceFormView, apply_service_errors
from notifications import services
from notifications.forms import AlertSettingsForm, PersonalSubscriptionForm, SubscriptionForm
from notifications.models import Delivery, DeliveryState, ProjectAlertSettings, Subscription
from projects.models import Project
from projects.permissions import AUTHENTICATED, can, get_object_for_user

DELIVERY_LOG_LENGTH = 100


def get_subscription_for_user(user, pk, action):
    """A personal subscription answers to its owner alone (others: 404); a project's goes
    through the matrix (`notification.view` / `notification.manage`)."""
    subscription = get_object_or_404(Subscription.objects.visible_to(user), pk=pk)
    if subscription.personal:
        return subscription
    return get_object_for_user(
        user, Subscription.objects.filter(user__isnull=True), action, pk=pk
    )


def _with_failing(subscriptions):
    from django.db.models import Count, Q

    return subscriptions.annotate(
        failing=Count("deliveries", filter=Q(deliveries__state=DeliveryState.FAILING))
    )


class SubscriptionCreateMixin:
    """Both pages add a subscription the same way, through the service."""

    def create(self, request, form, **kwargs):
        if not form.is_valid():
            return None
        data = form.cleaned_data
        try:
            subscription, secret = services.create_subscription(
                request.user,
                name=data["name"],
                channel=data["channel"],
                url=data.get("url") or "",
                email=data.get("email") or "",
                events=list(data["events"]),
                **kwargs,
            )
        except ValidationError as exc:
            apply_service_errors(form, exc)
            return None
        messages.success(request, f"Subscribed {subscription.name}.")
        return subscription, secret


class ProjectSubscriptionsView(SubscriptionCreateMixin, GantryView):
    """A project's subscriptions, and a form to add one (the webhook secret shown once)."""

    model = Project
    permission_action = "notification.manage"

    def render_page(self, request, project, form, new=None, status=200):
        subscriptions = _with_failing(project.subscriptions.filter(user__isnull=True))
        settings_row = ProjectAlertSettings.objects.filter(project=project).first()
        return render(
            request,
            "notifications/project_subscriptions.html",
            {
                "object": project,
                "project": project,
                "objects": subscriptions,
                "form": form,
                "new": new,
                "waiting_minutes": services.waiting_minutes_of(project),
                "settings_row": settings_row,
            },
            status=status,
        )

    def get(self, request, pk):
        return self.render_page(request, self.get_object(), SubscriptionForm())

    def post(self, request, pk):
        project = self.get_object()
        form = SubscriptionForm(data=request.POST)
        created = self.create(request, form, project=project)
        if created is None:
            return self.render_page(request, project, form, status=400)
        return self.render_page(request, project, SubscriptionForm(), new=created)


class MySubscriptionsView(SubscriptionCreateMixin, GantryView):
    """The user's own subscriptions: their jobs, or every job of a project they see."""

    permission_action = AUTHENTICATED

    def render_page(self, request, form, new=None, status=200):
        subscriptions = _with_failing(
            Subscription.objects.filter(user=request.user).select_related("project__tenant")
        )
        projects = Project.objects.visible_to(request.user).select_related("tenant")
        maintained = [p for p in projects if can(request.user, "notification.manage", p)]
        return render(
            request,
            "notifications/my_subscriptions.html",
            {"objects": subscriptions, "form": form, "new": new, "maintained": maintained},
            status=status,
        )

    def get(self, request):
        return self.render_page(request, PersonalSubscriptionForm(user=request.user))

    def post(self, request):
        form = PersonalSubscriptionForm(data=request.POST, user=request.user)
        project = form.cleaned_data.get("project") if form.is_valid() else None
        created = self.create(request, form, personal=True, project=project)
        if created is None:
            return self.render_page(request, form, status=400)
        return self.render_page(request, PersonalSubscriptionForm(user=request.user), new=created)


class SubscriptionDetailView(GantryView):
    """One subscription: where it sends, what, and its delivery log."""

    model = Subscription
    permission_action = "notification.view"

    def get_object(self):
        return get_subscription_for_user(self.request.user, self.kwargs["pk"], self.permission_action)

    def get(self, request, pk):
        subscription = self.get_object()
        deliveries = (
            Delivery.objects.filter(subscription=subscription)
            .select_related("job")
            .order_by("-pk")[:DELIVERY_LOG_LENGTH]
        )
        failing = Delivery.objects.filter(
            subscription=subscription, state=DeliveryState.FAILING
        ).count()
        return render(
            request,
            "notifications/subscription_detail.html",
            {"object": subscription, "deliveries": deliveries, "failing": failing},
        )


class SubscriptionDeleteView(SubscriptionDetailView):
    permission_action = "notification.manage"
    http_method_names = ["post"]

    def post(self, request, pk):
        subscription = self.get_object()
        back = (
            reverse("notifications:my_subscriptions")
            if subscription.personal
            else reverse("notifications:project_subscriptions", args=[subscription.project_id])
        )
        name = subscription.name
        services.delete_subscription(request.user, subscription)
        messages.success(request, f"Deleted {name}; it sends nothing more.")
        return redirect(back)


class SubscriptionTestView(SubscriptionDetailView):
    """Send a test message now, and show how it went in the log."""

    permission_action = "notification.manage"
    http_method_names = ["post"]

    def post(self, request, pk):
        subscription = self.get_object()
        row = services.send_test(request.user, subscription)
        if row.state == DeliveryState.DELIVERED:
            messages.success(request, "The test message was delivered.")
        else:
            messages.error(request, f"The test message did not get through: {row.last_error}")
        return redirect(subscription)


class AlertSettingsView(ServiceFormView):
    model = Project
    permission_action = "notification.manage"
    form_class = AlertSettingsForm
    title = "Notification thresholds"
    submit_label = "Save"
    success_message = "Saved."

    def get_form_kwargs(self, project):
        row = ProjectAlertSettings.objects.filter(project=project).first()
        return {"instance": row or ProjectAlertSettings(project=project)}

    def perform(self, form, project):
        return services.set_alert_settings(
            self.request.user, project, waiting_minutes=form.cleaned_data["waiting_minutes"]
        )

    def get_success_url(self, result):
        return reverse("notifications:project_subscriptions", args=[result.project_id])


class SubscriptionConfirmView(View):
    """The link mailed to an address someone subscribed: the signed link is the credential
    (the address's owner may have no account). Opening it asks; the button confirms, so a
    mail scanner that follows links confirms nothing."""

    template_name = "notifications/subscription_confirm.html"

    def get(self, request, token):
        try:
            subscription = services.subscription_to_confirm(token)
        except ValidationError as exc:
            return render(request, self.template_name, {"error": " ".join(exc.messages)}, status=400)
        return render(request, self.template_name, {"subscription": subscription})

    def post(self, request, token):
        try:
            subscription = services.confirm_email(token)
        except ValidationError as exc:
            return render(request, self.template_name, {"error": " ".join(exc.messages)}, status=400)
        return render(
            request, self.template_name, {"subscription": subscription, "confirmed": True}
        )
