"""Who calls the MLflow API and what they reach (STYLE: one access point per model).

Every service takes the `Caller` (user and the token the request came with) first and
checks the permission matrix (`experiment.view`, `experiment.log`, `experiment.delete`).
Something the caller may not see answers RESOURCE_DOES_NOT_EXIST, like something that
does not exist.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.urls import reverse

from projects.models import Project
from projects.permissions import can, visible_project_ids
from tracking.errors import MlflowError, invalid, not_found
from tracking.models import Experiment, Run
from tracking.services.validation import text

DEFAULT_EXPERIMENT = "Default"


@dataclass
class Caller:
    """Who calls: a user, and the API token (None for a browser session) that narrows
    what they reach. A job's tracking token stands as a write token limited to the
    job's project (tracking.jobenv)."""

    user: object
    token: object = None
    job: object = None

    def can(self, action: str, obj) -> bool:
        return can(self.user, action, obj, token=self.token)

    @property
    def project_id(self) -> int | None:
        return getattr(self.token, "project_id", None)


def home_project(caller: Caller) -> Project | None:
    """The project a bare name or experiment "0" means: the token's; else the user's
    default project (Settings), while they still see it; else their only project."""
    projects = Project.objects.select_related("tenant")
    if caller.project_id is not None:
        return projects.get(pk=caller.project_id)
    default_id = getattr(caller.user, "default_project_id", None)
    if default_id is not None:
        found = projects.visible_to(caller.user).filter(pk=default_id).first()
        if found is not None:
            return found
    ids = (
        list(Project.objects.values_list("pk", flat=True)[:2])
        if caller.user.is_superuser
        else visible_project_ids(caller.user)
    )
    return projects.get(pk=ids[0]) if len(ids) == 1 else None


def project_of_caller(caller: Caller, kind: str, name: str) -> Project:
    """`home_project`, or an error saying what to set: a bare name never falls through
    to an object of another project."""
    project = home_project(caller)
    if project is not None:
        return project
    if not Project.objects.visible_to(caller.user).exists():
        raise not_found(f"{kind} '{name}' names no project, and you have none.")
    reach = "this token reaches" if caller.token is not None else "you reach"
    raise invalid(
        f"{kind} '{name}' names no project, and {reach} several. Choose your default "
        f"project in Settings > API tokens ({reverse('accounts:token_list')}), use a token "
        f"limited to one project, or name it 'tenant/project/{name}'."
    )


def split_name(caller: Caller, name: str) -> tuple[Project | None, str]:
    """`tenant/project/name` names its project; a bare name means the caller's project."""
    parts = name.split("/", 2)
    if len(parts) == 3 and parts[2]:
        project = (
            Project.objects.visible_to(caller.user)
            .select_related("tenant")
            .filter(tenant__slug=parts[0], slug=parts[1])
            .first()
        )
        if project is not None:
            return project, parts[2]
    return None, name


def default_experiment(project: Project) -> Experiment:
    experiment = Experiment.objects.filter(project=project, is_default=True).first()
    if experiment is None:
        try:
            with transaction.atomic():
                experiment = Experiment.objects.create(
                    project=project, name=DEFAULT_EXPERIMENT, is_default=True
                )
        except IntegrityError:  # created meanwhile (or a user's experiment has the name)
            experiment = Experiment.objects.filter(project=project, is_default=True).first()
            if experiment is None:
                raise invalid(
                    f"The project's experiment '{DEFAULT_EXPERIMENT}' is not its default."
                ) from None
    return experiment


def visible(caller: Caller, queryset, action: str, obj_name: str, ident: str):
    obj = queryset.first()
    if obj is None or not caller.can("experiment.view", obj):
        raise not_found(f"{obj_name} '{ident}' does not exist.")
    if not caller.can(action, obj):
        raise MlflowError(
            f"You may not {action.split('.')[1]} in {obj_name.lower()} '{ident}'.",
            "PERMISSION_DENIED",
        )
    return obj


def get_experiment(caller: Caller, experiment_id, action: str = "experiment.view") -> Experiment:
    ident = str(experiment_id if experiment_id is not None else "")
    if ident in ("0", ""):
        experiment = default_experiment(project_of_caller(caller, "Experiment", "0"))
        return visible(
            caller,
            Experiment.objects.filter(pk=experiment.pk).select_related("project__tenant"),
            action,
            "Experiment",
            ident,
        )
    if not ident.isdigit() or len(ident) > 18:
        raise not_found(f"Experiment '{ident}' does not exist.")
    queryset = Experiment.objects.visible_to(caller.user).select_related("project__tenant")
    return visible(caller, queryset.filter(pk=int(ident)), action, "Experiment", ident)


def get_experiment_by_name(caller: Caller, name: str) -> Experiment:
    if not isinstance(name, str) or not name:
        raise invalid("Missing value for required parameter 'experiment_name'.")
    project, bare = split_name(caller, name)
    if project is None:
        project = project_of_caller(caller, "Experiment", name)
    queryset = Experiment.objects.visible_to(caller.user).select_related("project__tenant")
    return visible(
        caller, queryset.filter(project=project, name=bare), "experiment.view", "Experiment", name
    )


def get_run(caller: Caller, run_id, action: str = "experiment.view") -> Run:
    run_id = text(run_id, "run_id", 64)
    queryset = Run.objects.visible_to(caller.user).select_related("experiment__project__tenant")
    run = queryset.filter(run_id=run_id).first()
    if run is None or not caller.can("experiment.view", run):
        raise not_found(f"Run with id={run_id} not found")
    run = visible(
        caller,
        Run.objects.filter(pk=run.pk).select_related("experiment__project__tenant"),
        action,
        "Run",
        run_id,
    )
    if (
        action != "experiment.view"
        and caller.job is not None
        and run.job_id not in (None, caller.job.pk)
    ):
        raise MlflowError(
            f"A job's token logs only to its own run, not to '{run_id}'.", "PERMISSION_DENIED"
        )
    return run
