from django import forms, template
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from core import formatting
from core.access import can as matrix_can

register = template.Library()

# The main navigation. Entries whose page does not exist yet are left out.
NAVIGATION = [
    ("Projects", "projects:project_list", "bi-kanban"),
    ("Datasets", "datasets:dataset_list", "bi-database"),
    ("Jobs", "jobs:job_list", "bi-cpu"),
    ("Models", "modelhub:model_list", "bi-box-seam"),
    ("Sweeps", "sweeps:sweep_list", "bi-sliders"),
    ("Images", "images:image_list", "bi-layers"),
    ("Cluster", "scheduling:overview", "bi-hdd-rack"),
]


@register.simple_tag(takes_context=True)
def navigation(context):
    current = context["request"].path
    items = []
    for label, url_name, icon in NAVIGATION:
        try:
            url = reverse(url_name)
        except NoReverseMatch:
            continue
        items.append({"label": label, "url": url, "icon": icon, "active": current.startswith(url)})
    return items


@register.simple_tag
def filter_options(form, name):
    """The `<option>`s of a list page's choice filter, its current value selected.

    The same markup a loop in the template made, in a fraction of the time: the loop
    asked the form for the field's value once per option.
    """
    bound = form[name]
    current = bound.value()
    current = "" if current is None else str(current)
    field = bound.field
    choices = field.choices
    if isinstance(field, forms.ModelChoiceField):
        # One plain query: Django's choice iterator reads the rows through .iterator(),
        # which on PostgreSQL is a server-side cursor (three round trips, not one).
        rows = [(field.prepare_value(obj), field.label_from_instance(obj)) for obj in field.queryset]
        choices = rows if field.empty_label is None else [("", field.empty_label), *rows]
    return format_html_join(
        "",
        '<option value="{}"{}>{}</option>',
        ((value, " selected" if str(value) == current else "", label) for value, label in choices),
    )


@register.simple_tag(takes_context=True)
def can(context, action, obj):
    """`{% can "project.change" project as allowed %}`: the permission matrix in templates."""
    return matrix_can(context["request"].user, action, obj)


@register.filter
def widget_class(field):
    widget = field.field.widget
    if isinstance(widget, forms.CheckboxInput):
        css = "form-check-input"
    elif isinstance(widget, forms.Select | forms.SelectMultiple):
        css = "form-select"
    else:
        css = "form-control"
    if field.errors:
        css += " is-invalid"
    return field.as_widget(attrs={"class": css})


@register.filter
def role_badge(role):
    colours = {
        "owner": "text-bg-dark",
        "admin": "text-bg-primary",
        "member": "text-bg-secondary",
        "maintainer": "text-bg-primary",
        "developer": "text-bg-info",
        "viewer": "text-bg-light border",
    }
    return colours.get(role, "text-bg-secondary")


# The one formatter (core/formatting.py) as filters: every template shows sizes,
# durations and numbers through these, never Django's filesizeformat or floatformat.


@register.filter
def size(value):
    """Bytes: `{{ file.size|size }}` -> '18.7 KiB'."""
    return formatting.format_size(value)


@register.filter
def size_mb(value):
    """MiB (memory, quotas) by the same rule: 2048 -> '2.0 GiB'."""
    return formatting.format_size_mb(value)


# The old name, kept for templates not yet swapped.
filesizeformat_mb = register.filter("filesizeformat_mb", size_mb)


@register.filter
def duration(value):
    """Seconds or a timedelta: 192 -> '3 min 12 s'."""
    return formatting.format_duration(value)


@register.filter
def number(value):
    """Counts with separators, measurements with four significant digits."""
    return formatting.format_number(value)


@register.filter
def metric(value):
    """A logged metric's value: four significant digits."""
    return formatting.format_number(value)


@register.filter
def display(value):
    """A stored value typed for reading: None as '—', JSON objects as JSON."""
    return formatting.format_value(value)


@register.filter
def when(value):
    """A time as 'relative' with the absolute one on hover: `{{ job.finished_at|when }}`."""
    if not value:
        return formatting.DASH
    absolute = timezone.localtime(value).strftime("%Y-%m-%d %H:%M:%S %Z")
    ago = formatting.format_ago((timezone.now() - value).total_seconds())
    return format_html('<time datetime="{}" title="{}">{}</time>', value.isoformat(), absolute, ago)


@register.filter
def elapsed(job):
    """How long a job ran (or has been running): started -> finished, or -> now."""
    started = getattr(job, "started_at", None)
    if not started:
        return formatting.DASH
    end = getattr(job, "finished_at", None) or timezone.now()
    return formatting.format_duration(end - started)
