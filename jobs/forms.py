"""Submit forms, one per kind. They turn text into a spec; jobs.services validates it."""

from django import forms

from core import registry
from core.formatting import format_size
from datasets.models import DatasetVersion
from images.models import RuntimeImage
from images.services import images_for_job
from jobs.models import JobKind
from snapshots.forms import CodeSnapshotField


def dataset_version_label(version: DatasetVersion) -> str:
    return (
        f"{version.dataset.name} v{version.number} ({version.dataset.project.name}): "
        f"{version.file_count} files, {format_size(version.total_size)} "
        f"at data/{version.dataset.slug}"
    )


def infer_value(text: str):
    """`8` -> 8, `0.1` -> 0.1, `true` -> True, anything else stays text."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            continue
    return text


def parse_pairs(text: str, *, infer: bool) -> dict:
    """`name=value` lines (blank lines and # comments ignored)."""
    pairs = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            raise forms.ValidationError(f"Line {number}: write name=value, not “{line}”.")
        value = value.strip()
        pairs[name.strip()] = infer_value(value) if infer else value
    return pairs


def format_pairs(values: dict) -> str:
    def show(value):
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)

    return "\n".join(f"{k}={show(v)}" for k, v in values.items())



class DatasetVersionsField(forms.ModelMultipleChoiceField):
    """Ids beyond the database's integers are unknown choices: Django sends the `__in`
    lookup to the database as it is, where SQLite answers OverflowError (a 500)."""

    def _check_values(self, value):
        for pk in value or ():
            try:
                number = int(pk)
            except (TypeError, ValueError):
                continue  # Django's own message for a value that is no id
            if not -(2**63) <= number < 2**63:
                raise forms.ValidationError(
                    self.error_messages["invalid_choice"], code="invalid_choice", params={"value": pk}
                )
        return super()._check_values(value)

class NotebookJobForm(forms.Form):
    kind = JobKind.NOTEBOOK

    name = forms.CharField(max_length=200, required=False, help_text="Defaults to the command.")
    runtime = forms.CharField(
        max_length=500,
        required=False,
        help_text="Path to a Python interpreter or virtualenv on this machine; "
        "blank uses Gantry's own Python.",
    )
    image = forms.ModelChoiceField(
        queryset=None,
        required=False,
        empty_label="None (the runtime above)",
        help_text="The environment to run in; its digest is resolved now and recorded. "
        "On the local backend an image's local environment is the runtime.",
    )
    gpus = forms.IntegerField(min_value=0, initial=0, label="GPUs")
    cpus = forms.IntegerField(min_value=1, initial=1, label="CPUs")
    memory_mb = forms.IntegerField(min_value=16, initial=2048, label="Memory (MiB)")
    code_snapshot = CodeSnapshotField()
    dataset_versions = DatasetVersionsField(
        queryset=None,
        required=False,
        label="Input datasets",
        help_text="Each version is staged read-only at data/<dataset>.",
    )
    model_version = forms.ModelChoiceField(
        queryset=None,
        required=False,
        label="Input model",
        empty_label="None",
        help_text="The version's files are staged at model/.",
    )

    def __init__(self, *args, user=None, project=None, **kwargs):
        super().__init__(*args, **kwargs)
        field = self.fields["image"]
        if user is None or project is None:
            field.queryset = RuntimeImage.objects.none()
        else:
            field.queryset = images_for_job(user, project)
        field.label_from_instance = lambda image: (
            f"{image.name} — {image.reference}" + (" (legacy)" if image.legacy else "")
        )
        self._inputs_fields(user, project)

    def _inputs_fields(self, user, project) -> None:
        """Code and inputs: only what the user can see, of this project (code) or its
        tenant (datasets, models)."""
        self.fields["code_snapshot"].offer(user, project)
        datasets, model = self.fields["dataset_versions"], self.fields["model_version"]
        if user is None or project is None:
            datasets.queryset = DatasetVersion.objects.none()
            del self.fields["model_version"]
            return
        datasets.queryset = (
            DatasetVersion.objects.visible_to(user)
            .filter(dataset__project__tenant_id=project.tenant_id)
            .select_related("dataset__project")
            .order_by("dataset__name", "-number")
        )
        datasets.label_from_instance = dataset_version_label
        datasets.widget.attrs.update({"size": 6, "data-searchable": "1"})
        # Model versions live in modelhub, above jobs: asked through the registry.
        choices = registry.model_input_choices(user, project)
        if choices is None:
            del self.fields["model_version"]
        else:
            model.queryset = choices
            model.label_from_instance = lambda v: f"{v.model.name} v{v.number}"
            model.widget.attrs.update({"data-searchable": "1"})

    def spec(self) -> dict:
        data = dict(self.cleaned_data)
        versions = data.pop("dataset_versions", None) or []
        model_version = data.pop("model_version", None)
        inputs = [{"dataset_version": v.pk} for v in versions]
        if model_version is not None:
            inputs.append(registry.model_input_entry(model_version))
        data["inputs"] = inputs
        data["kind"] = self.kind
        return data


class TrainJobForm(NotebookJobForm):
    kind = JobKind.TRAIN
    field_order = ["name", "command", "runtime", "image", "parameters", "env"]

    command = forms.CharField(
        widget=forms.TextInput(attrs={"placeholder": "python train.py --epochs 3"}),
        help_text="Split like a shell would; a leading “python” runs under the runtime.",
    )
    parameters = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "lr=0.001\nepochs=10"}),
        required=False,
        help_text="One name=value per line; numbers and true/false are typed. "
        "Passed as --name value and as GANTRY_PARAM_NAME.",
    )
    env = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        required=False,
        label="Environment",
        help_text="One NAME=value per line.",
    )
    timeout_seconds = forms.IntegerField(
        min_value=1, required=False, label="Timeout (seconds)", help_text="Blank: no limit."
    )
    max_retries = forms.IntegerField(
        min_value=0, max_value=10, initial=0, help_text="Retries after a failed or lost run."
    )
    priority = forms.IntegerField(initial=0, help_text="Higher runs first.")

    def clean_parameters(self):
        return parse_pairs(self.cleaned_data.get("parameters") or "", infer=True)

    def clean_env(self):
        return parse_pairs(self.cleaned_data.get("env") or "", infer=False)


class DistributedJobForm(TrainJobForm):
    kind = JobKind.DISTRIBUTED

    workers = forms.IntegerField(
        min_value=1,
        max_value=64,
        initial=2,
        help_text="Started together; each gets the GPUs, CPUs and memory above.",
    )


FORMS = {
    JobKind.TRAIN: TrainJobForm,
    JobKind.DISTRIBUTED: DistributedJobForm,
    JobKind.NOTEBOOK: NotebookJobForm,
}


def initial_from_job(job) -> dict:
    """A form's initial data from an existing job (clone-and-edit)."""
    record = getattr(job, "image_record", None)
    image = record.image if record else None
    runtime = job.runtime
    if image is not None and image.local_env and runtime == image.local_env:
        runtime = ""  # it came from the image; picking another image must not keep it
    return {
        "name": job.name,
        "runtime": runtime,
        "image": image.pk if image else None,
        "command": job.command,
        "parameters": format_pairs(job.parameters),
        "env": format_pairs(job.env),
        "gpus": job.gpus,
        "cpus": job.cpus,
        "memory_mb": job.memory_mb,
        "workers": job.workers,
        "timeout_seconds": job.timeout_seconds,
        "max_retries": job.max_retries,
        "priority": job.priority,
        "code_snapshot": job.code_snapshot_id,
        **initial_inputs(job),
    }


def initial_inputs(job) -> dict:
    """The pickers' initial values from a job's inputs (clone keeps them)."""
    entries = [e for e in job.inputs or [] if isinstance(e, dict)]
    model_version = None
    for entry in (e for e in entries if "model" in e):
        try:
            model_version = registry.model_version_of_input(job.project, entry)
        except (TypeError, ValueError):  # not an entry the picker wrote
            continue
        if model_version is not None:
            break
    return {
        "dataset_versions": [e["dataset_version"] for e in entries if "dataset_version" in e],
        "model_version": model_version,
    }
