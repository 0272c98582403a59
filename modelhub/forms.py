from django import forms

from images.forms import MultipleFileField


class TagsField(forms.CharField):
    def prepare_value(self, value):
        return ", ".join(value) if isinstance(value, list) else value


class RegisteredModelForm(forms.Form):
    name = forms.CharField(max_length=200)
    description = forms.CharField(max_length=500, required=False)
    tags = TagsField(required=False, help_text="Comma-separated.")
    card = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 10}),
        required=False,
        label="Model card",
        help_text="Markdown: what the model does, its data, how it was evaluated, its limits.",
    )


class VersionUploadForm(forms.Form):
    files = MultipleFileField(
        help_text="The model's files, e.g. model.safetensors and config.json."
    )
    description = forms.CharField(max_length=500, required=False)
    tags = TagsField(required=False, help_text="Comma-separated.")


class FileLabel(str):
    """A file choice's label: reads as its path, and carries its size for the template."""

    def __new__(cls, path: str, size: int):
        label = super().__new__(cls, path)
        label.size = size
        return label


class RegisterFromJobForm(forms.Form):
    model = forms.ModelChoiceField(queryset=None, required=False, empty_label="— a new model —")
    model_name = forms.CharField(max_length=200, required=False, label="New model name")
    paths = forms.MultipleChoiceField(
        choices=(),
        required=False,
        widget=forms.CheckboxSelectMultiple(attrs={"class": "form-check-input"}),
        label="Files",
        help_text="None ticked: all of the job's output files.",
    )
    description = forms.CharField(
        max_length=500, required=False, help_text="Shown on the version's page."
    )

    def __init__(self, *args, models, paths, **kwargs):
        """`paths`: the job's output files as (path, size in bytes)."""
        super().__init__(*args, **kwargs)
        self.fields["model"].queryset = models
        self.fields["paths"].choices = [(path, FileLabel(path, size)) for path, size in paths]


class AliasForm(forms.Form):
    name = forms.CharField(max_length=64, help_text="e.g. production, staging, candidate")
    version = forms.IntegerField(min_value=1, help_text="Version number")


class PredictForm(forms.Form):
    command = forms.CharField(
        initial="python examples/predict_digits.py",
        help_text="Parameters are passed as --name value; model is the staged model file.",
    )
    image = forms.ModelChoiceField(queryset=None, required=False, empty_label="Gantry's Python")
    inputs = forms.JSONField(
        required=False,
        initial=list,
        help_text="Dataset versions to stage, as job inputs (a JSON list); may be empty.",
    )
    gpus = forms.IntegerField(min_value=0, initial=0)
    code_snapshot = forms.ModelChoiceField(
        queryset=None,
        required=False,
        label="Code",
        empty_label="None",
        help_text="An earlier upload of the project's code (e.g. the training job's, with "
        "examples/predict_digits.py), staged read-only in the job's working directory.",
    )

    def __init__(self, *args, images, snapshots=None, **kwargs):
        from snapshots.forms import snapshot_label

        super().__init__(*args, **kwargs)
        self.fields["image"].queryset = images
        self.fields["code_snapshot"].queryset = snapshots
        self.fields["code_snapshot"].label_from_instance = snapshot_label
