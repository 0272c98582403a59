from django.contrib import messages
from django.core.exceptions import ValidationError
from django.shortcuts import redirect, render
from django.urls import reverse

from accounts.models import Tenant
from core.views import (
    GantryView,
    ObjectDeleteView,
    ObjectDetailView,
    ObjectListView,
    ServiceFormView,
)
from images import buildah, services
from images.filters import RuntimeImageFilterSet
from images.forms import ImageBuildForm, ImageEditForm, ImageForm
from images.models import ImageBuild, RuntimeImage
from projects.permissions import AUTHENTICATED, can


class RuntimeImageListView(ObjectListView):
    model = RuntimeImage
    permission_action = "image.view"
    filterset_class = RuntimeImageFilterSet
    template_name = "images/image_list.html"
    partial_template_name = "images/_image_table.html"

    def get_queryset(self):
        return super().get_queryset().select_related("tenant")

    def get_extra_context(self):
        return {"registry_host": services.registry_host()}


class RuntimeImageDetailView(ObjectDetailView):
    model = RuntimeImage
    permission_action = "image.view"
    template_name = "images/image_detail.html"

    def get_extra_context(self, image):
        return {
            "registry": services.registry_details(image),
            "builds": ImageBuild.objects.filter(base=image)
            .visible_to(self.request.user)
            .select_related("tenant")[:20],
        }


class RuntimeImageCreateView(ServiceFormView):
    """Register an image that already exists in a registry, in the tenant `pk`."""

    model = Tenant
    permission_action = "image.create"
    form_class = ImageForm
    title = "Add an image"
    submit_label = "Add image"
    success_message = "Added {object}."

    def perform(self, form, tenant):
        return services.create_image(self.request.user, tenant, **form.cleaned_data)


class RuntimeImageEditView(ServiceFormView):
    model = RuntimeImage
    permission_action = "image.change"
    form_class = ImageEditForm
    title = "Edit image"
    success_message = "Saved {object}."

    def get_form_kwargs(self, image):
        fields = ImageEditForm.base_fields
        return {"initial": {name: getattr(image, name) for name in fields}}

    def perform(self, form, image):
        return services.update_image(self.request.user, image, **form.cleaned_data)


class RuntimeImageResolveView(GantryView):
    model = RuntimeImage
    permission_action = "image.change"
    http_method_names = ["post"]

    def post(self, request, *args, **kwargs):
        image = self.get_object()
        try:
            services.resolve_image(request.user, image)
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
        else:
            messages.success(request, f"{image.tag} is {image.digest}.")
        return redirect(image.get_absolute_url())


class RuntimeImageDeleteView(ObjectDeleteView):
    model = RuntimeImage
    permission_action = "image.delete"

    def perform(self, image):
        services.delete_image(
            self.request.user, image, from_registry=self.request.POST.get("from_registry") == "on"
        )

    def get_success_url(self, image):
        return reverse("images:image_list")


class ImageBuildCreateView(ServiceFormView):
    """A custom image on top of the image `pk`: files and packages (images.buildah, or
    pure-Python ones where there is no buildah: images.builder)."""

    model = RuntimeImage
    permission_action = "image.view"  # the base; the service checks image.create on the tenant
    form_class = ImageBuildForm
    template_name = "images/build_form.html"
    title = "Build a custom image"
    submit_label = "Start build"
    success_message = "Queued {object}."

    def get_form_kwargs(self, image):
        tenants = Tenant.objects.visible_to(self.request.user)
        kwargs = {"tenants": tenants}
        if self.request.method == "POST":
            kwargs["files"] = self.request.FILES
        elif image.tenant_id:
            kwargs["initial"] = {"tenant": image.tenant_id}
        elif self.request.tenant:
            kwargs["initial"] = {"tenant": self.request.tenant.pk}
        return kwargs

    def get_context(self, form, image):
        return {**super().get_context(form, image), "real_builder": buildah.available()}

    def perform(self, form, image):
        data = form.cleaned_data
        directory = data["directory"].rstrip("/") or ""
        files = [(f"{directory}/{upload.name}", upload) for upload in data["files"]]
        return services.start_build(
            self.request.user,
            image,
            data["tenant"],
            name=data["name"],
            tag=data["tag"],
            requirements=data["requirements"],
            files=files,
        )


class ImageBuildDetailView(ObjectDetailView):
    model = ImageBuild
    permission_action = "image.view"
    template_name = "images/build_detail.html"

    def get(self, request, *args, **kwargs):
        if request.htmx:
            return render(request, "images/_build_status.html", {"object": self.get_object()})
        return super().get(request, *args, **kwargs)


class RegistryView(GantryView):
    """The registry's repositories this user may see, and a repository's tags (?repository=)."""

    permission_action = AUTHENTICATED

    def get(self, request, *args, **kwargs):
        listing = services.visible_repositories(request.user)
        repository = request.GET.get("repository", "")
        tags, error = [], listing.get("error")
        if repository and repository in listing["repositories"]:
            try:
                with services.registry_client() as client:
                    tags = [
                        {"tag": tag, "digest": client.resolve(repository, tag)}
                        for tag in client.tags(repository)[:100]
                    ]
            except services.RegistryError as exc:
                error = str(exc)
        return render(
            request,
            "images/registry.html",
            {
                "repositories": listing["repositories"],
                "repository": repository,
                "tags": tags,
                "error": error,
                "registry_host": services.registry_host(),
                "can_add": [
                    t
                    for t in Tenant.objects.visible_to(request.user)
                    if can(request.user, "image.create", t)
                ],
            },
        )
