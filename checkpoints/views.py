"""The job page's checkpoints panel (templates/checkpoints/_job_checkpoints.html) and its
buttons: register one as a model version, start a new job from one. The buttons are
POST only; each calls one service and returns to the page it leads to. The panel is
refetched by the page when a checkpoint is committed (`services.commit_checkpoint`
tells the job's websocket group)."""

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.shortcuts import redirect, render

from checkpoints.forms import RegisterCheckpointForm
from checkpoints.models import Checkpoint
from checkpoints.services import register_as_model_version, start_job_from
from core.views import GantryView
from jobs.models import Job


class JobCheckpointsView(GantryView):
    """The panel alone, for the job page to swap in (HTMX)."""

    model = Job
    permission_action = "job.view"

    def get(self, request, *args, **kwargs):
        return render(request, "checkpoints/_job_checkpoints.html", {"object": self.get_object()})


class CheckpointActionView(GantryView):
    model = Checkpoint
    http_method_names = ["post"]

    def get_object(self):
        from projects.permissions import get_object_for_user

        queryset = Checkpoint.objects.complete().select_related("job__project__tenant")
        return get_object_for_user(
            self.request.user, queryset, self.permission_action, pk=self.kwargs["pk"]
        )

    def act(self, checkpoint):
        raise NotImplementedError

    def post(self, request, *args, **kwargs):
        checkpoint = self.get_object()
        try:
            return redirect(self.act(checkpoint))
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
            return redirect(checkpoint.job.get_absolute_url())


class CheckpointRegisterView(CheckpointActionView):
    permission_action = "model.register"

    def act(self, checkpoint):
        form = RegisterCheckpointForm(self.request.POST)
        if not form.is_valid():
            raise ValidationError([e for errors in form.errors.values() for e in errors])
        name = form.cleaned_data["model_name"]
        version = register_as_model_version(self.request.user, checkpoint, name)
        messages.success(self.request, f"Registered {checkpoint.name} as {version}.")
        return version.get_absolute_url()


class CheckpointResumeView(CheckpointActionView):
    permission_action = "job.submit"

    def act(self, checkpoint):
        job = start_job_from(self.request.user, checkpoint)
        messages.success(self.request, f"Submitted {job}, resuming from {checkpoint.name}.")
        return job.get_absolute_url()
