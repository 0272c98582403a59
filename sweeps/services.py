"""Every state change of a sweep: create from a YAML/JSON document, stop. Views, the API
and the CLI call these; the controller (sweeps/controller.py) drives running sweeps."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction

from core import audit
from jobs.backends import get_backend
from jobs.services.validation import SPEC_FIELDS, validate_spec
from projects.permissions import require
from sweeps.models import FINISHED_STATES, Sweep, SweepState
from sweeps.space import parse_sweep

TEMPLATE_FIELDS = (*SPEC_FIELDS, "image", "code_snapshot")  # a snapshot once jobs take one


def clean_template(actor, project, template: dict, space: dict) -> dict:
    """The job template checked as jobs would check a trial's spec (with the first choice
    of every parameter standing in), so a sweep that could never submit is refused now."""
    unknown = set(template) - set(TEMPLATE_FIELDS)
    if unknown:
        raise ValidationError({"template": f"Unknown job fields: {', '.join(sorted(map(str, unknown)))}."})
    snapshot = template.get("code_snapshot")
    if snapshot is not None:
        if "code_snapshot" not in SPEC_FIELDS:
            raise ValidationError({"template": "template.code_snapshot: jobs take no code snapshots yet."})
        if not isinstance(snapshot, int):
            raise ValidationError({"template": "template.code_snapshot: a snapshot id."})
    spec = {k: v for k, v in template.items() if k != "image"}
    if not isinstance(spec.get("parameters", {}), dict):
        raise ValidationError({"template": "template.parameters: a mapping of name to value."})
    probe = {name: (s["choices"][0] if s["type"] == "categorical" else s["low"]) for name, s in space.items()}
    spec["parameters"] = {**(spec.get("parameters") or {}), **probe}
    try:
        validate_spec(spec, get_backend())
    except ValidationError as exc:
        raise ValidationError(
            {"template": [f"template.{field}: {' '.join(msgs)}" for field, msgs in exc.message_dict.items()]}
        ) from None
    clean = dict(template)
    image_id = template.get("image")
    if image_id is not None:
        from images.models import RuntimeImage
        from images.services import check_image_for_project

        image = RuntimeImage.objects.filter(pk=image_id).first() if isinstance(image_id, int) else None
        if image is None:
            raise ValidationError({"template": f"template.image: no image #{image_id}."})
        try:
            check_image_for_project(actor, project, image)
        except Exception as exc:  # PermissionDenied/Http404/ValidationError alike: one message
            raise ValidationError({"template": f"template.image: image #{image_id} cannot be used here."}) from exc
    return clean


@transaction.atomic
def create_sweep(actor, project, source: str) -> Sweep:
    """A sweep from its document (sweeps/space.py); its first trials start at once."""
    require(actor, "sweep.create", project)
    fields = parse_sweep(source)
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
