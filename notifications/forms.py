from django import forms

from notifications.models import Channel, Event, ProjectAlertSettings, Subscription


class SubscriptionForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What it is for, e.g. “#ml-alerts”.")
    channel = forms.ChoiceField(choices=Channel.choices, initial=Channel.WEBHOOK)
    url = forms.URLField(
        max_length=500,
        required=False,
        assume_scheme="https",
        label="URL",
        help_text="For webhooks and Slack/Mattermost: the address to POST to.",
    )
    email = forms.EmailField(
        max_length=254, required=False, help_text="For email: where to send it."
    )
    events = forms.MultipleChoiceField(
        choices=Event.choices,
        widget=forms.CheckboxSelectMultiple,
        initial=[Event.FAILED, Event.LOST, Event.PREEMPTED],
    )


class PersonalSubscriptionForm(SubscriptionForm):
    project = forms.ModelChoiceField(
        queryset=None,
        required=False,
        empty_label="Only jobs I submit",
        help_text="Or every job of one project you can see.",
    )

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        projects = Subscription._meta.get_field("project").related_model.objects
        self.fields["project"].queryset = projects.visible_to(user).select_related("tenant")
        self.fields["email"].help_text = "For email: where to send it (your address if empty)."


class AlertSettingsForm(forms.ModelForm):
    class Meta:
        model = ProjectAlertSettings
        fields = ["waiting_minutes"]
        labels = {"waiting_minutes": "Waiting alert after (minutes)"}
        help_texts = {
            "waiting_minutes": "A queued job's subscribers hear why it waits after this long."
        }
        widgets = {"waiting_minutes": forms.NumberInput(attrs={"min": 1, "max": 43200})}
