from datetime import timedelta

from django import forms
from django.contrib.auth import get_user_model
from django.utils import timezone
from django.utils.text import slugify

from accounts.models import ApiToken, Invitation, Tenant, TenantRole

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


class DefaultProjectForm(forms.Form):
    default_project = forms.ModelChoiceField(
        queryset=None,
        required=False,
        empty_label="None: refuse bare names",
        label="Default project for MLflow",
        help_text=(
            'What a bare experiment or model name (mlflow.set_experiment("digits")) means '
            "for a token or sign-in that reaches several projects."
        ),
    )

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        projects = User._meta.get_field("default_project").related_model.objects
        self.fields["default_project"].queryset = projects.visible_to(user).select_related("tenant")
        if not self.is_bound:
            self.initial.setdefault("default_project", user.default_project_id)


INVITATION_DAYS = [("1", "1 day"), ("7", "7 days"), ("30", "30 days")]


class InvitationForm(forms.Form):
    email = forms.EmailField(max_length=254)
    role = forms.ChoiceField(
        choices=[(r.value, r.label) for r in (TenantRole.MEMBER, TenantRole.ADMIN)],
        initial=TenantRole.MEMBER,
    )
    project = forms.ModelChoiceField(
        queryset=None, required=False, empty_label="No project role", help_text="Optional."
    )
    project_role = forms.ChoiceField(required=False, label="Project role")
    days = forms.TypedChoiceField(
        choices=INVITATION_DAYS, coerce=int, initial="7", label="Link works for"
    )

    def __init__(self, *args, tenant, user, **kwargs):
        from accounts.invitations import project_roles

        super().__init__(*args, **kwargs)
        projects = Invitation._meta.get_field("project").related_model.objects
        self.fields["project"].queryset = projects.visible_to(user).filter(tenant=tenant)
        self.fields["project_role"].choices = [("", "—")] + [
            (role, role.capitalize()) for role in project_roles()
        ]


class InvitationSignUpForm(forms.Form):
    """The account an invitation creates; the password is checked by Django's validators
    (in accounts.invitations, which raises on `password1`)."""

    username = forms.CharField(max_length=150, help_text="Letters, digits and @ . + - _ only.")
    password1 = forms.CharField(label="Password", strip=False, widget=forms.PasswordInput)
    password2 = forms.CharField(label="Password again", strip=False, widget=forms.PasswordInput)

    def clean(self):
        data = super().clean()
        if data.get("password1") and data.get("password1") != data.get("password2"):
            self.add_error("password2", "The two passwords differ.")
        return data
