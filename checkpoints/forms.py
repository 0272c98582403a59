from django import forms


class RegisterCheckpointForm(forms.Form):
    """The job page's "Register as model" button: the model's name (the job's by default)."""

    model_name = forms.CharField(max_length=200, required=False, strip=True)
