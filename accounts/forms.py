from datetime import timedelta

from django import forms
from django.contrib.auth import get_user_model
from django.utils import timezone
from django.utils.text import slugify

from accounts.models import ApiToken, Tenant, TenantRole

User = get_user_model()


class SlugFromNameMixin:
    """Leave the slug empty and it is made from the name."""

    def clean_slug(self):
        slug = self.cleaned_data.get("slug") or slugify(self.cleaned_data.get("name", ""))[:50]
        if not slug:
            raise forms.ValidationError("Give a slug of letters, numbers, hyphens or underscores.")
        return slug

    def _post_clean(self):
        # Model uniqueness is the service's job; it answers with field errors too.
        pass


class TenantForm(SlugFromNameMixin, forms.ModelForm):
    class Meta:
        model = Tenant
        fields = ["name", "slug", "description"]
        widgets = {"description": forms.Textarea(attrs={"rows": 3})}
        help_texts = {
            "slug": "Short name used in URLs and on the cluster. Leave empty to derive it."
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["slug"].required = False


class MemberAddForm(forms.Form):
    user = forms.CharField(label="Username or email", max_length=254)  # an email's limit
    role = forms.ChoiceField(choices=TenantRole.choices, initial=TenantRole.MEMBER)

    def clean_user(self):
        value = self.cleaned_data["user"].strip()
        user = (
            User.objects.filter(username__iexact=value).first()
            or User.objects.filter(email__iexact=value).first()
        )
        if user is None:
            raise forms.ValidationError(
                f"No user “{value}”. They must sign in once, or an administrator creates the account."
            )
        return user


class MemberRoleForm(forms.Form):
    role = forms.ChoiceField(choices=TenantRole.choices)


EXPIRY_CHOICES = [
    ("", "Never"),
    ("7", "7 days"),
    ("30", "30 days"),
    ("90", "90 days"),
    ("365", "1 year"),
]


class ApiTokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What the token is for, e.g. “CI pipeline”.")
    scope = forms.ChoiceField(choices=ApiToken._meta.get_field("scope").choices, initial="read")
    project = forms.ModelChoiceField(queryset=None, required=False, empty_label="All my projects")
    expires_in_days = forms.TypedChoiceField(
        choices=EXPIRY_CHOICES, required=False, coerce=int, empty_value=None, label="Expires"
    )

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        # The projects a token may be limited to: the token's relation knows their model.
        projects = ApiToken._meta.get_field("project").related_model.objects
        self.fields["project"].queryset = projects.visible_to(user).select_related("tenant")

    def expires_at(self):
        days = self.cleaned_data.get("expires_in_days")
        return timezone.now() + timedelta(days=days) if days else None
