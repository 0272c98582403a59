import io
import zipfile

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db.models import Count, Prefetch
from django.http import FileResponse, Http404
from django.urls import reverse

from core.views import ObjectDeleteView, ObjectDetailView, ObjectListView, ServiceFormView
from images.models import RuntimeImage
from jobs.models import Job
from modelhub import services
from modelhub.filters import RegisteredModelFilterSet
from modelhub.forms import (
    AliasForm,
    PredictForm,
    RegisteredModelForm,
    RegisterFromJobForm,
    VersionUploadForm,
)
from modelhub.markdown import render_card
from modelhub.models import Alias, AliasMove, ModelVersion, RegisteredModel
from projects.models import Project


class RegisteredModelListView(ObjectListView):
    model = RegisteredModel
    permission_action = "model.view"
    filterset_class = RegisteredModelFilterSet
    template_name = "modelhub/model_list.html"
    partial_template_name = "modelhub/_model_table.html"

    def get_queryset(self):
        queryset = (
            super()
            .get_queryset()
            .select_related("project__tenant")
            .annotate(version_count=Count("versions"))
            .prefetch_related(Prefetch("aliases", queryset=Alias.objects.select_related("version")))
            .order_by("-updated_at", "-pk")
        )
        if self.request.tenant and "project" not in self.request.GET:
            queryset = queryset.filter(project__tenant=self.request.tenant)
        return queryset


class RegisteredModelCreateView(ServiceFormView):
    model = Project
    permission_action = "model.register"
    form_class = RegisteredModelForm
    title = "New model"
    submit_label = "Create model"
    success_message = "Created {object}."

    def perform(self, form, project):
        return services.create_model(self.request.user, project, **form.cleaned_data)


class RegisteredModelEditView(ServiceFormView):
    model = RegisteredModel
    permission_action = "model.register"
    form_class = RegisteredModelForm
    title = "Edit model"
    success_message = "Saved {object}."

    def get_form_kwargs(self, model):
        fields = ("name", "description", "tags", "card")
        return {"initial": {name: getattr(model, name) for name in fields}}

    def perform(self, form, model):
        return services.update_model(self.request.user, model, **form.cleaned_data)


class RegisteredModelDetailView(ObjectDetailView):
    model = RegisteredModel
    permission_action = "model.view"
    template_name = "modelhub/model_detail.html"

    def get_extra_context(self, model):
        versions = list(
            model.versions.select_related("source_job", "created_by").prefetch_related("aliases")
        )
        latest = versions[0] if versions else None
        return {
            "versions": versions,
            "aliases": model.aliases.select_related("version", "updated_by"),
            "moves": AliasMove.objects.filter(model=model).select_related(
                "from_version", "to_version", "actor"
            )[:20],
            "card_html": render_card(model.card),
            "lineage": services.lineage(latest) if latest else None,
            "latest": latest,
            "alias_form": AliasForm(),
        }


class RegisteredModelDeleteView(ObjectDeleteView):
    model = RegisteredModel
    permission_action = "model.delete"

    def get_contents(self, model):
        return [("versions", model.versions.count())]

    def perform(self, model):
        services.delete_model(self.request.user, model)

    def get_success_url(self, model):
        return reverse("modelhub:model_list")


class VersionUploadView(ServiceFormView):
    model = RegisteredModel
    permission_action = "model.register"
    form_class = VersionUploadForm
    template_name = "modelhub/upload_form.html"
    title = "Upload a version"
    submit_label = "Upload"
    success_message = "Registered {object}."

    def get_form_kwargs(self, model):
        return {"files": self.request.FILES} if self.request.method == "POST" else {}

    def perform(self, form, model):
        data = form.cleaned_data
        files = [(upload.name, upload) for upload in data["files"]]
        return services.upload_version(
            self.request.user, model, files, description=data["description"], tags=data["tags"]
        )


class RegisterFromJobView(ServiceFormView):
    """Register the job `pk`'s output files as a model version."""

    model = Job
    permission_action = "model.register"
    form_class = RegisterFromJobForm
    template_name = "modelhub/register_form.html"
    title = "Register as a model"
    submit_label = "Register version"
    success_message = "Registered {object}."

    def get_form_kwargs(self, job):
        return {
            "models": RegisteredModel.objects.filter(project=job.project),
            "paths": list(job.artifacts.filter(worker=0).values_list("path", "size")),
        }

    def perform(self, form, job):
        data = form.cleaned_data
        return services.register_version_from_job(
            self.request.user,
            job,
            model=data["model"],
            model_name=data["model_name"] or job.name,
            paths=data["paths"] or None,
            description=data["description"],
        )


class AliasSetView(ServiceFormView):
    model = RegisteredModel
    permission_action = "model.alias"
    form_class = AliasForm
    title = "Set an alias"
    submit_label = "Set alias"
    success_message = "Alias set."

    def perform(self, form, model):
        data = form.cleaned_data
        services.set_alias(self.request.user, model, data["name"], data["version"])
        return model


class ModelVersionDetailView(ObjectDetailView):
    model = ModelVersion
    permission_action = "model.view"
    template_name = "modelhub/version_detail.html"

    def get_extra_context(self, version):
        return {
            "files": version.files.all(),
            "aliases": version.aliases.all(),
            "lineage": services.lineage(version),
            "others": version.model.versions.exclude(pk=version.pk).only("number")[:50],
        }


class ModelVersionDownloadView(ObjectDetailView):
    """One file (?path=) or the whole version as a zip."""

    model = ModelVersion
    permission_action = "model.view"

    def get(self, request, *args, **kwargs):
        version = self.get_object()
        path = request.GET.get("path")
        if path:
            found = version.files.filter(path=path).first()
            if found is None:
                raise Http404
            return FileResponse(
                found.file.open("rb"), as_attachment=True, filename=path.rsplit("/", 1)[-1]
            )
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
            for item in version.files.all():
                with item.file.open("rb") as handle, archive.open(item.path, "w") as out:
                    while chunk := handle.read(1024 * 1024):
                        out.write(chunk)
        buffer.seek(0)
        name = f"{version.model.name}-v{version.number}.zip".replace("/", "-")
        return FileResponse(buffer, as_attachment=True, filename=name)


class CompareVersionsView(ObjectDetailView):
    """Two versions' metrics and parameters side by side (?a=&b= version numbers)."""

    model = RegisteredModel
    permission_action = "model.view"
    template_name = "modelhub/compare.html"

    def get_extra_context(self, model):
        try:
            a, b = services.pick_versions(
                model, self.request.GET.get("a"), self.request.GET.get("b")
            )
        except ValidationError as exc:
            messages.error(self.request, " ".join(exc.messages))
            a, b = services.pick_versions(model)
        return {
            "versions": model.versions.only("number"),
            "a": a,
            "b": b,
            "rows": services.compare_versions(a, b) if a and b else None,
        }


class PredictView(ServiceFormView):
    """Start a prediction job from this version, its files staged under model/."""

    model = ModelVersion
    permission_action = "job.submit"
    form_class = PredictForm
    title = "Predict with this model"
    submit_label = "Submit prediction job"
    success_message = "Submitted {object}."

    def get_form_kwargs(self, version):
        from snapshots.models import CodeSnapshot

        snapshots = CodeSnapshot.objects.visible_to(self.request.user).filter(
            project=version.model.project, state="ready"
        )
        # Preselected: the code of the job that trained this version.
        job = version.source_job
        initial = {"code_snapshot": job.code_snapshot_id} if job is not None else {}
        return {
            "images": RuntimeImage.objects.visible_to(self.request.user),
            "snapshots": snapshots,
            "initial": initial,
        }

    def perform(self, form, version):
        data = form.cleaned_data
        return services.predict(
            self.request.user,
            version,
            command=data["command"],
            inputs=data["inputs"] or [],
            image=data["image"],
            gpus=data["gpus"],
            code_snapshot=data["code_snapshot"],
        )
