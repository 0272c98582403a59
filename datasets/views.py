from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.shortcuts import redirect
from django.urls import reverse

from core import registry
from core.views import (
    GantryView,
    ObjectDeleteView,
    ObjectDetailView,
    ObjectListView,
    ServiceFormView,
)
from datasets import downloads
from datasets.filters import DatasetFilterSet
from datasets.forms import ArchiveForm, DatasetForm, FromJobForm
from datasets.models import Dataset, DatasetFile, DatasetVersion, UploadSession, UploadState
from datasets.services import archives, catalog, quotas, uploads, versions
from projects.models import Project
from projects.views import PROJECT_CONTENTS


class DatasetListView(ObjectListView):
    model = Dataset
    permission_action = "dataset.view"
    filterset_class = DatasetFilterSet
    template_name = "datasets/dataset_list.html"
    partial_template_name = "datasets/_dataset_table.html"

    def get_queryset(self):
        queryset = super().get_queryset().select_related("project__tenant")
        if self.request.tenant and "project" not in self.request.GET:
            queryset = queryset.filter(project__tenant=self.request.tenant)
        return queryset


class DatasetCreateView(ServiceFormView):
    """A new dataset in the project given by `pk`."""

    model = Project
    permission_action = "dataset.create"
    form_class = DatasetForm
    title = "New dataset"
    submit_label = "Create dataset"
    success_message = "Created {object}."

    def perform(self, form, project):
        return catalog.create_dataset(self.request.user, project, **form.cleaned_data)


class DatasetEditView(ServiceFormView):
    model = Dataset
    permission_action = "dataset.create"
    form_class = DatasetForm
    title = "Edit dataset"
    success_message = "Saved {object}."

    def get_form_kwargs(self, dataset):
        return {"instance": dataset}

    def perform(self, form, dataset):
        data = {k: v for k, v in form.cleaned_data.items() if k != "slug"}
        return catalog.update_dataset(self.request.user, dataset, **data)


class DatasetDetailView(ObjectDetailView):
    model = Dataset
    permission_action = "dataset.view"
    template_name = "datasets/dataset_detail.html"

    def get_extra_context(self, dataset):
        tenant = dataset.project.tenant
        return {
            "versions": dataset.versions.select_related("created_by")[:50],
            "uploads": dataset.uploads.filter(
                state__in=(UploadState.OPEN, UploadState.COMMITTING, UploadState.FAILED)
            ),
            "archives": dataset.archives.exclude(state=UploadState.COMMITTED)[:10],
            "quota": quotas.tenant_quota(tenant),
            "usage": quotas.tenant_usage(tenant),
        }


class DatasetDeleteView(ObjectDeleteView):
    model = Dataset
    permission_action = "dataset.delete"

    def get_contents(self, dataset):
        return [("versions", dataset.versions.count())]

    def perform(self, dataset):
        catalog.delete_dataset(self.request.user, dataset)

    def get_success_url(self, dataset):
        return reverse("projects:project_detail", args=[dataset.project_id])


class DatasetUploadView(ObjectDetailView):
    """The upload page: drag and drop, resumable; the JavaScript speaks datasets/api.py."""

    model = Dataset
    permission_action = "dataset.create"
    template_name = "datasets/upload.html"

    def get_extra_context(self, dataset):
        tenant = dataset.project.tenant
        return {
            "latest": dataset.latest_version(),
            "quota": quotas.tenant_quota(tenant),
            "usage": quotas.tenant_usage(tenant),
        }


class DatasetArchiveView(ServiceFormView):
    model = Dataset
    permission_action = "dataset.create"
    form_class = ArchiveForm
    template_name = "datasets/archive_form.html"
    title = "Unpack an archive into a new version"
    submit_label = "Upload and unpack"

    def get_form_kwargs(self, dataset):
        return {"files": self.request.FILES} if self.request.method == "POST" else {}

    def perform(self, form, dataset):
        parent = "latest" if form.cleaned_data["on_top_of_latest"] else None
        archive = archives.start_archive_import(
            self.request.user, dataset, form.cleaned_data["archive"], parent
        )
        messages.info(
            self.request, f"Unpacking {archive.file_name} in the background; the new version appears here when it is done."
        )
        return dataset


class DatasetFromJobView(ServiceFormView):
    model = Dataset
    permission_action = "dataset.create"
    form_class = FromJobForm
    title = "Save a job's outputs as a new version"
    submit_label = "Save as new version"

    def get_form_kwargs(self, dataset):
        jobs = registry.jobs_with_outputs(self.request.user, dataset.project.tenant)
        return {"jobs": jobs}

    def perform(self, form, dataset):
        return versions.save_job_outputs(
            self.request.user, form.cleaned_data["job"], dataset, form.cleaned_data["message"]
        )


class VersionDetailView(ObjectDetailView):
    model = DatasetVersion
    permission_action = "dataset.view"
    template_name = "datasets/version_detail.html"

    def get_extra_context(self, version):
        files = version.files.all()
        prefix = self.request.GET.get("prefix", "")
        if prefix:
            files = files.filter(path__startswith=prefix)
        page = Paginator(files.order_by("path"), 200).get_page(self.request.GET.get("page"))
        return {"page": page, "files": page.object_list, "prefix": prefix}


class VersionDownloadView(GantryView):
    model = DatasetVersion
    permission_action = "dataset.view"

    def get(self, request, *args, **kwargs):
        return downloads.version_zip(self.get_object())


class FileDetailView(ObjectDetailView):
    model = DatasetFile
    permission_action = "dataset.view"
    template_name = "datasets/file_detail.html"

    def get_extra_context(self, file):
        return {"preview": downloads.preview(file)}


class FileDownloadView(GantryView):
    model = DatasetFile
    permission_action = "dataset.view"

    def get(self, request, *args, **kwargs):
        return downloads.file_response(self.get_object(), inline="inline" in request.GET)


class UploadDetailView(ObjectDetailView):
    model = UploadSession
    permission_action = "dataset.view"
    template_name = "datasets/upload_detail.html"

    def get_extra_context(self, session):
        return {"status": uploads.upload_status(session)}


class UploadAbortView(GantryView):
    model = UploadSession
    permission_action = "dataset.create"
    http_method_names = ["post"]

    def post(self, request, *args, **kwargs):
        session = self.get_object()
        try:
            uploads.abort_upload(request.user, session)
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
        else:
            messages.success(request, f"Aborted {session}; its parts are deleted.")
        return redirect(session.dataset.get_absolute_url())


PROJECT_CONTENTS.append(("datasets", lambda project: project.datasets.count()))
