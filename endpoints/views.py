"""The endpoint pages: the list, an endpoint's page (state, try it, curl, charts, the
requests' log), "Deploy" from a model version's page, delete."""

from django import forms
from django.shortcuts import render
from django.urls import reverse

from core.views import ObjectDeleteView, ObjectDetailView, ObjectListView, ServiceFormView
from endpoints import rollout, services, traffic
from endpoints.filters import EndpointFilterSet
from endpoints.models import Endpoint
from modelhub.models import ModelVersion
from projects.permissions import can


class EndpointListView(ObjectListView):
    model = Endpoint
    permission_action = "endpoint.view"
    filterset_class = EndpointFilterSet
    template_name = "endpoints/endpoint_list.html"

    def get_queryset(self):
        return (
            super()
            .get_queryset()
            .select_related("project__tenant", "model", "version", "serving_version")
            .order_by("project", "name")
        )


class EndpointDetailView(ObjectDetailView):
    model = Endpoint
    permission_action = "endpoint.view"
    template_name = "endpoints/endpoint_detail.html"

    def get_object(self):
        endpoint = super().get_object()
        return Endpoint.objects.select_related(
            "project__tenant", "model", "version", "serving_version", "canary_serving_version"
        ).get(pk=endpoint.pk)

    def get_extra_context(self, endpoint):
        user = self.request.user
        url = self.request.build_absolute_uri(endpoint.gateway_path)
        state, replicas_now = rollout.live_status(endpoint)
        return {
            "state": state,
            "replicas_now": replicas_now,
            "gateway_url": url,
            "example": EXAMPLE,
            "versions": traffic.summary(endpoint),
            "chart": traffic.per_minute(endpoint),
            "recent": endpoint.requests.all()[:50],
            "can_call": can(user, "endpoint.predict", endpoint),
            "can_manage": can(user, "endpoint.manage", endpoint),
        }


# Eight by eight pixels in 0..1: the digits model's input (what `examples/` trains on).
EXAMPLE = (
    '{"inputs": [{"name": "input-0", "shape": [1, 64], "datatype": "FP64", "data": '
    "[0, 0, 0.3, 0.8, 0.6, 0.1, 0, 0, 0, 0, 0.8, 0.9, 0.6, 0.9, 0.3, 0, 0, 0.2, 0.9, 0.1, "
    "0, 0.7, 0.5, 0, 0, 0.3, 0.8, 0, 0, 0.5, 0.5, 0, 0, 0.3, 0.5, 0, 0, 0.6, 0.5, 0, 0, "
    "0.3, 0.7, 0, 0.1, 0.8, 0.4, 0, 0, 0.1, 0.9, 0.3, 0.6, 0.8, 0, 0, 0, 0, 0.4, 0.8, 0.6, "
    "0, 0, 0]}]}"
)


class EndpointForm(forms.Form):
    name = forms.SlugField(
        max_length=50, help_text="Part of its URL: /serve/<tenant>/<project>/<name>/"
    )
    alias = forms.CharField(
        max_length=64,
        required=False,
        help_text="Follow this alias (moving it rolls the endpoint); empty: serve this version.",
    )
    canary_alias = forms.CharField(max_length=64, required=False)
    canary_percent = forms.IntegerField(min_value=0, max_value=100, initial=0)
    replicas = forms.IntegerField(min_value=1, max_value=16, initial=1)
    cpus = forms.IntegerField(min_value=1, max_value=64, initial=1)
    memory_mb = forms.IntegerField(
        min_value=128, max_value=1024 * 1024, initial=1024, label="Memory (MiB)"
    )
    idle_seconds = forms.IntegerField(
        min_value=0,
        max_value=30 * 24 * 3600,
        initial=900,
        help_text="Scale to zero after this long without a request (0: never).",
    )
    rate_limit = forms.IntegerField(
        min_value=0, max_value=1_000_000, initial=100, help_text="Requests a second (0: no limit)."
    )


class EndpointCreateView(ServiceFormView):
    """ "Deploy" on a model version's page."""

    model = ModelVersion
    permission_action = "endpoint.manage"
    form_class = EndpointForm
    title = "Deploy as an endpoint"
    submit_label = "Deploy"
    success_message = "Created the endpoint {object}; it starts on its first request."

    def get_form_kwargs(self, version):
        alias = version.aliases.order_by("name").values_list("name", flat=True).first()
        return {
            "initial": {
                "name": version.model.name.lower().replace("_", "-")[:50],
                "alias": alias or "",
            }
        }

    def perform(self, form, version):
        data = dict(form.cleaned_data)
        name = data.pop("name")
        if not data["alias"]:
            data["version"] = version
        return services.create_endpoint(
            self.request.user, version.model.project, name=name, model=version.model, **data
        )


class EndpointTokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="Who gets it, e.g. the service calling it.")


class EndpointTokenCreateView(ServiceFormView):
    """A token that calls this endpoint only; its secret is shown on the answer, once."""

    model = Endpoint
    permission_action = "endpoint.manage"
    form_class = EndpointTokenForm
    title = "New endpoint token"
    submit_label = "Create token"

    def perform(self, form, endpoint):
        return services.create_endpoint_token(
            self.request.user, endpoint, form.cleaned_data["name"]
        )

    def post(self, request, *args, **kwargs):
        endpoint = self.get_target()
        form = self.form_class(data=request.POST)
        if form.is_valid():
            token, secret = self.perform(form, endpoint)
            url = request.build_absolute_uri(endpoint.gateway_path)
            context = {"object": endpoint, "token": token, "secret": secret, "gateway_url": url}
            response = render(request, "endpoints/token_created.html", context)
            response["Cache-Control"] = "no-store"
            return response
        return render(request, self.template_name, self.get_context(form, endpoint), status=400)


class EndpointDeleteView(ObjectDeleteView):
    model = Endpoint
    permission_action = "endpoint.manage"

    def get_contents(self, endpoint):
        return [
            ("logged requests", endpoint.requests.count()),
            ("endpoint tokens", endpoint.tokens.count()),
        ]

    def perform(self, endpoint):
        services.delete_endpoint(self.request.user, endpoint)

    def get_success_url(self, endpoint):
        return reverse("endpoints:endpoint_list")
