from django import forms

from datasets.models import Dataset


class DatasetForm(forms.Form):
    name = forms.CharField(max_length=100)
    slug = forms.SlugField(max_length=50, required=False, help_text="Blank: made from the name.")
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False)
    tags = forms.CharField(required=False, help_text="Comma-separated, e.g. images, labelled")
    licence = forms.CharField(max_length=100, required=False, help_text="e.g. CC-BY-4.0")

    def __init__(self, *args, instance: Dataset | None = None, **kwargs):
        if instance is not None:
            kwargs.setdefault(
                "initial",
                {
                    "name": instance.name,
                    "slug": instance.slug,
                    "description": instance.description,
                    "tags": ", ".join(instance.tags),
                    "licence": instance.licence,
                },
            )
        super().__init__(*args, **kwargs)
        if instance is not None:
            self.fields["slug"].disabled = True


class ArchiveForm(forms.Form):
    archive = forms.FileField(
        help_text="A .zip, .tar, .tar.gz or .tgz file, unpacked on the server."
    )
    on_top_of_latest = forms.BooleanField(
        required=False, initial=True, label="Add to the latest version (else start empty)"
    )


class FromJobForm(forms.Form):
    job = forms.ModelChoiceField(queryset=None, help_text="A job of this tenant with output files.")
    message = forms.CharField(max_length=500, required=False)

    def __init__(self, *args, jobs=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["job"].queryset = jobs
