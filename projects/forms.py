from django import forms
from django.contrib.auth import get_user_model

from accounts.forms import SlugFromNameMixin
from projects.models import Project, ProjectRole

User = get_user_model()


class ProjectForm(SlugFromNameMixin, forms.ModelForm):
    class Meta:
        model = Project
        fields = ["name", "slug", "description", "visibility"]
        widgets = {"description": forms.Textarea(attrs={"rows": 3})}
        help_texts = {"slug": "Short name used in URLs. Leave empty to derive it from the name."}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["slug"].required = False


class ProjectMemberAddForm(forms.Form):
    user = forms.ModelChoiceField(
        queryset=User.objects.none(),
        help_text="Members of the tenant who are not in the project yet.",
    )
    role = forms.ChoiceField(choices=ProjectRole.choices, initial=ProjectRole.DEVELOPER)

    def __init__(self, *args, project, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["user"].queryset = User.objects.filter(
            memberships__tenant=project.tenant
        ).exclude(project_memberships__project=project)


class ProjectMemberRoleForm(forms.Form):
    role = forms.ChoiceField(choices=ProjectRole.choices)
