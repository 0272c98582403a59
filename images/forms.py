from django import forms

from images.models import Framework


class ImageForm(forms.Form):
    name = forms.CharField(max_length=200)
    reference = forms.CharField(
        max_length=500,
        help_text="registry/repository:tag (or @sha256:…), e.g. registry.lab.example/team/img:1.0",
    )
    framework = forms.ChoiceField(choices=Framework.choices, initial=Framework.CUSTOM)
    framework_version = forms.CharField(max_length=32, required=False)
    cuda_version = forms.CharField(max_length=16, required=False, help_text="Blank: CPU only.")
    python_version = forms.CharField(max_length=16, required=False)
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False)
    local_env = forms.CharField(
        max_length=500,
        required=False,
        label="Local environment",
        help_text="Local backend only: a virtualenv or Python interpreter standing in for it.",
    )
    resolve = forms.BooleanField(
        required=False, initial=True, help_text="Look the tag up in Gantry's registry now."
    )


class ImageEditForm(forms.Form):
    name = forms.CharField(max_length=200)
    framework = forms.ChoiceField(choices=Framework.choices)
    framework_version = forms.CharField(max_length=32, required=False)
    cuda_version = forms.CharField(max_length=16, required=False)
    python_version = forms.CharField(max_length=16, required=False)
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False)
    legacy = forms.BooleanField(required=False)
    local_env = forms.CharField(max_length=500, required=False, label="Local environment")


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("widget", MultipleFileInput())
        super().__init__(*args, **kwargs)

    def clean(self, data, initial=None):
        if isinstance(data, list | tuple):
            return [super(MultipleFileField, self).clean(d, initial) for d in data]
        return [super().clean(data, initial)] if data else []


class ImageBuildForm(forms.Form):
    tenant = forms.ModelChoiceField(queryset=None, empty_label=None)
    name = forms.CharField(max_length=200, help_text="The new image's name in Gantry.")
    tag = forms.CharField(max_length=128, required=False, help_text="Blank: the date and time.")
    requirements = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4, "class": "mono"}),
        required=False,
        help_text="One package per line (name and version specifiers). Pure-Python wheels only: "
        "pip runs on the Gantry host, not inside the image.",
    )
    files = MultipleFileField(required=False, help_text="Files to add to the image.")
    directory = forms.CharField(
        max_length=500, initial="/opt/app", help_text="Where the files go inside the image."
    )

    def __init__(self, *args, tenants, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["tenant"].queryset = tenants
