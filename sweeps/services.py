"""Every state change of a sweep: create from a YAML/JSON document, stop. Views, the API
and the CLI call these; the controller (sweeps/controller.py) drives running sweeps."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction

from core import audit
from jobs.services.submit import check_submission
from jobs.services.validation import SPEC_FIELDS
from projects.permissions import require
from sweeps.models import FINISHED_STATES, Sweep, SweepState
from sweeps.space import parse_sweep

TEMPLATE_FIELDS = (*SPEC_FIELDS, "image")


def _as_template_errors(exc: ValidationError) -> ValidationError:
    """A job's field errors as the template's (`template.<field>: ...`, keyed `template`)."""
    if not hasattr(exc, "error_dict"):
        return ValidationError({"template": [f"template: {m}" for m in exc.messages]})
    return ValidationError(
        {
            "template": [
                f"template{'' if field == '__all__' else '.' + field}: {' '.join(messages)}"
                for field, messages in exc.message_dict.items()
            ]
        }
    )


def _template_image(actor, project, image_id):
    if image_id is None:
        return None
    from images.models import RuntimeImage
    from images.services import check_image_for_project

    image = RuntimeImage.objects.filter(pk=image_id).first() if isinstance(image_id, int) else None
    if image is None:
        raise ValidationError({"template": f"template.image: no image #{image_id}."})
    try:
        check_image_for_project(actor, project, image)
    except Exception as exc:  # PermissionDenied/Http404/ValidationError alike: one message
        raise ValidationError({"template": f"template.image: image #{image_id} cannot be used here."}) from exc
    return image


def clean_template(actor, project, template: dict, space: dict) -> dict:
    """The job template checked as jobs check a submission (jobs' `check_submission`: the
    spec, the image, the code snapshot, the dataset inputs), with the first choice of every
    parameter standing in, so a sweep that could never submit a trial is refused now.

    Returns the template with its dataset inputs pinned to versions (every trial reads the
    same data) and its code snapshot as an id."""
    unknown = set(template) - set(TEMPLATE_FIELDS)
    if unknown:
        raise ValidationError({"template": f"Unknown job fields: {', '.join(sorted(map(str, unknown)))}."})
    if not isinstance(template.get("parameters") or {}, dict):
        raise ValidationError({"template": "template.parameters: a mapping of name to value."})
    image = _template_image(actor, project, template.get("image"))
    spec = {k: v for k, v in template.items() if k != "image"}
    probe = {name: (s["choices"][0] if s["type"] == "categorical" else s["low"]) for name, s in space.items()}
    spec["parameters"] = {**(spec.get("parameters") or {}), **probe}
    try:
        checked, _digest = check_submission(actor, project, image=image, **spec)
    except ValidationError as exc:
        raise _as_template_errors(exc) from None
    clean = dict(template)
    if "inputs" in template:
        clean["inputs"] = checked["inputs"]
    if checked["code_snapshot"] is not None:
        clean["code_snapshot"] = checked["code_snapshot"].pk
    return clean


@transaction.atomic
def create_sweep(actor, project, source: str, *, code_snapshot=None) -> Sweep:
    """A sweep from its document (sweeps/space.py); its first trials start at once.

    `code_snapshot` (a CodeSnapshot or its id: the code picked on the page, the folder
    `gantry sweep start` sent) becomes the template's, over any the document names."""
    require(actor, "sweep.create", project)
    fields = parse_sweep(source)
    if code_snapshot is not None:
        fields["template"]["code_snapshot"] = getattr(code_snapshot, "pk", code_snapshot)
    fields["template"] = clean_template(actor, project, fields["template"], fields["space"])
    sweep = Sweep.objects.create(project=project, created_by=actor, source=source, **fields)
    audit.record(actor, "sweep.create", sweep, name=sweep.name, trials=sweep.max_trials)
    from sweeps.tasks import queue_control

    transaction.on_commit(lambda: queue_control(sweep.pk))
    return sweep


def stop_sweep(actor, sweep: Sweep) -> Sweep:
    """Ask the controller to stop the sweep: running trials are cancelled, none is added."""
    require(actor, "sweep.stop", sweep)
    with transaction.atomic():
        changed = Sweep.objects.filter(pk=sweep.pk).exclude(state__in=FINISHED_STATES).update(
            state=SweepState.STOPPING, state_reason=f"stopped by {actor.username}"
        )
        if not changed:
            sweep.refresh_from_db()
            raise ValidationError(f"Sweep #{sweep.pk} has already ended ({sweep.get_state_display().lower()}).")
        audit.record(actor, "sweep.stop", sweep)
    from sweeps.controller import control_sweep

    control_sweep(sweep.pk)
    sweep.refresh_from_db()
    return sweep
