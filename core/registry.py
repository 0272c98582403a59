"""Every question a lower app asks a higher one, declared in one place (STYLE.md rule 15).

Arrows between apps run one way, downward (docs/developers/layout.md). Where a lower app
must still ask something only a higher app knows (which model versions a job may mount,
which blobs checkpoints hold, who may do what), the question is declared here, as NetBox
declares its stores in `netbox/registry.py`: a function whose signature and docstring say
what is asked, who answers and what the answer is when nobody did, and whose body is that
default. The higher app registers its function in its `AppConfig.ready()`:

    registry.never_runs.register(admission.never_runs)        # scheduling/apps.py

and the lower app calls the point as it would the function: `registry.never_runs(project,
spec, backend)`. "Go to definition" on a call leads here; the docstring names the provider.
A point marked `many` takes a provider from each app that has an answer and returns the
list of their answers. `tests/test_architecture.py` checks that every point has a provider
once Django has started, and that no other mechanism (a global handed in at start-up, a
setting naming a module) has crept back.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

from django.core.exceptions import ImproperlyConfigured


class ExtensionPoint:
    """One declared question: call it like its declaration; providers register into it."""

    def __init__(self, declaration: Callable, *, provided_by: str, many: bool, required: bool):
        functools.update_wrapper(self, declaration)
        self.name = declaration.__name__
        self.provided_by = provided_by
        self.many = many
        self.required = required
        self.default = declaration
        self.providers: list[Callable] = []

    def __repr__(self) -> str:
        return f"<extension point {self.name} (provided by {self.provided_by})>"

    def register(self, provider: Callable) -> Callable:
        """Add `provider` (idempotent: AppConfig.ready may run twice in tests)."""
        if provider in self.providers:
            return provider
        if self.providers and not self.many:
            raise ImproperlyConfigured(
                f"{self.name} is already provided by {self.providers[0].__module__}."
                f"{self.providers[0].__qualname__}; it takes one provider."
            )
        self.providers.append(provider)
        return provider

    @contextmanager
    def replaced_by(self, *providers: Callable):
        """Answer with `providers` instead, for the length of a `with` block (tests)."""
        saved, self.providers = self.providers, list(providers)
        try:
            yield self
        finally:
            self.providers = saved

    def __call__(self, *args, **kwargs) -> Any:
        if self.many:
            return [provider(*args, **kwargs) for provider in self.providers]
        if self.providers:
            return self.providers[0](*args, **kwargs)
        if self.required:
            raise ImproperlyConfigured(
                f"Nothing provides the extension point {self.name}: {self.provided_by} "
                "registers it when it starts (is that app in INSTALLED_APPS?)."
            )
        return self.default(*args, **kwargs)


# name -> point, in the order declared: the whole list of extension points.
EXTENSION_POINTS: dict[str, ExtensionPoint] = {}


def extension_point(*, provided_by: str, many: bool = False, required: bool = False):
    """Declare the decorated function as an extension point (its body is the default)."""

    def declare(declaration: Callable) -> ExtensionPoint:
        point = ExtensionPoint(declaration, provided_by=provided_by, many=many, required=required)
        assert point.name not in EXTENSION_POINTS, point.name
        EXTENSION_POINTS[point.name] = point
        return point

    return declare


# --- core asks projects: the permission matrix (core.access re-exports these) -------------
# projects.permissions holds the matrix (projects/apps.py registers each function). Default
# for each: none (ImproperlyConfigured); nothing in Gantry may be reached without the matrix.
_ACCESS = "projects (projects.permissions)"


@extension_point(provided_by=_ACCESS, required=True)
def can(user, action: str, obj, token=None) -> bool:
    """May `user` take `action` on `obj`? `token` narrows what an API token may do."""


@extension_point(provided_by=_ACCESS, required=True)
def require(user, action: str, obj, token=None) -> None:
    """Raise PermissionDenied unless the user may take the action (services call this)."""


@extension_point(provided_by=_ACCESS, required=True)
def restrict(queryset, user, action: str, token=None, *, field: str | None = None):
    """The rows of `queryset` that `user` (with `token`) may reach for `action`; `field`
    names the path to the project when the rows are not projects' own."""


@extension_point(provided_by=_ACCESS, required=True)
def get_object_for_user(user, queryset, action: str, token=None, **lookup):
    """The one access point: 404 for what the user cannot see, 403 for what they cannot do."""


@extension_point(provided_by=_ACCESS, required=True)
def token_of(request):
    """The personal API token a request came with, or None."""


@extension_point(provided_by=_ACCESS, required=True)
def view_action_of(action: str) -> str:
    """The view action that goes with `action` (to tell 404 from 403), or `action` itself."""


@extension_point(provided_by=_ACCESS, required=True)
def tenant_role(user, tenant) -> str | None:
    """The user's role in the tenant, or None."""


@extension_point(provided_by=_ACCESS, required=True)
def forget_roles(user) -> None:
    """Drop what the request knows of the user's roles after a membership change."""


# --- accounts asks projects -----------------------------------------------------------------


@extension_point(provided_by="projects (projects.sso.apply_groups)", required=True)
def apply_sso_groups(user, groups) -> None:
    """Make the user's tenant and project roles match the SSO `groups` claim, at each
    single sign-on inside its transaction (accounts.services.sync_oidc_user).
    Default: none (ImproperlyConfigured)."""


@extension_point(provided_by="projects (projects.services.project_roles)", required=True)
def project_roles() -> list[str]:
    """The project roles an invitation may grant (accounts.invitations).
    Default: none (ImproperlyConfigured)."""


@extension_point(provided_by="projects (projects.services.add_project_member)", required=True)
def add_project_member(*, actor, project, user, role: str):
    """Add `user` to `project` with `role` on `actor`'s authority, as an accepted invitation
    does (accounts.invitations.accept). Default: none (ImproperlyConfigured)."""


# --- datasets asks jobs: a job's outputs saved as a dataset version ------------------------
_OUTPUTS = "jobs (jobs.dataset_outputs)"


@extension_point(provided_by=_OUTPUTS, required=True)
def jobs_with_outputs(user, tenant):
    """The jobs of `tenant` with output files that `user` may view, newest first (the
    "from job outputs" page). Default: none (ImproperlyConfigured)."""


@extension_point(provided_by=_OUTPUTS, required=True)
def job_with_outputs(user, pk, token=None):
    """The job `pk` if the user (and API token) may view it; Http404 otherwise (the API's
    from-job action). Default: none (ImproperlyConfigured)."""


@extension_point(provided_by=_OUTPUTS, required=True)
def job_output_files(job) -> list:
    """The job's output files as `datasets.job_outputs.OutputFile`s (worker N>0's under
    worker-N/), for `datasets.services.versions.save_job_outputs`.
    Default: none (ImproperlyConfigured)."""


# --- datasets asks the apps that keep files in its blob store -------------------------------


@extension_point(
    provided_by="checkpoints (tenant_checkpoint_blobs), snapshots (tenant_snapshot_blobs)",
    many=True,
)
def blobs_held(tenant):
    """A queryset of the sha256 values of blobs the provider's rows hold for `tenant`; they
    count in its storage quota (datasets.services.quotas.tenant_usage). Many providers;
    with none, only dataset files count."""


@extension_point(provided_by="snapshots (pending_snapshot_bytes)", many=True)
def bytes_reserved(tenant) -> int:
    """Bytes the provider has reserved in `tenant`'s storage quota for contents still on
    their way (code snapshots waiting for their files), so two uploads cannot both take the
    last bytes. Many providers; with none, only dataset uploads reserve."""


# --- jobs asks scheduling -------------------------------------------------------------------


@extension_point(provided_by="scheduling (scheduling.admission.never_runs)")
def never_runs(project, spec: dict, backend=None) -> tuple[str, str] | None:
    """(form field, message) when a job of this shape can never start for the project's
    tenant (larger than every node or than its quota), else None; asked before a job is
    queued (jobs.services.submit). Default: None (nothing is refused)."""
    return None


@extension_point(provided_by="scheduling (scheduling.admission.tenant_limits)")
def tenant_limits(tenant) -> dict | None:
    """The tenant's hard limits, {"gpus", "cpus", "memory_mb"} (None = no limit), or None
    when it has none; the Kubernetes backend turns them into the namespace's ResourceQuota.
    Default: None (no limits)."""
    return None


@extension_point(provided_by="scheduling (scheduling.tasks.admit_and_launch)", required=True)
def admit_and_launch(kicked: bool = False) -> dict:
    """One admission pass, then every admitted job's executors started:
    {"admitted": n, "launched": n}. Run by jobs' task `jobs.tasks.admit_and_launch` (every
    minute, and kicked after submits and freed capacity). Default: none
    (ImproperlyConfigured)."""


# --- jobs asks modelhub: model versions as a job's inputs ----------------------------------


@extension_point(provided_by="modelhub (modelhub.services.model_file_for_job)")
def model_file_for_job(job, pk: int):
    """The model file `pk` a job's token may stage (only files of model versions in the
    job's own project), or None; the agent API's model-files endpoint serves it.
    Default: None (answered as a file that does not exist)."""
    return None


@extension_point(provided_by="modelhub (modelhub.services.model_input_choices)")
def model_input_choices(user, project):
    """The model versions the job form offers as an input (a queryset), or None for no
    model picker. Default: None."""
    return None


@extension_point(provided_by="modelhub (modelhub.services.model_inputs)", required=True)
def model_input_entry(version) -> dict:
    """The job input entry that stages a picked model version (asked only when
    `model_input_choices` offered it). Default: none (ImproperlyConfigured)."""


@extension_point(provided_by="modelhub (modelhub.services.model_version_of_input)")
def model_version_of_input(project, entry: dict):
    """The pk of the project's model version a job input entry names, or None (the job
    form's clone keeps the pick). Default: None."""
    return None


# --- jobs (holdings) and scheduling (admission, cluster page) ask endpoints ------------------


@extension_point(provided_by="endpoints (endpoints.services.serving_replicas)")
def serving_replicas(user) -> list:
    """The model endpoints with replicas running now that `user` may see, for the cluster
    page: dicts of `endpoint` (the object), `replicas`, `cpus`, `memory_mb`, `gpus` (what
    the running replicas hold). Default: none (no endpoints app)."""
    return []


@extension_point(provided_by="endpoints (endpoints.services.tenant_serving_holdings)", many=True)
def service_holdings(tenant_ids=None) -> dict:
    """What the provider's long-running services (model endpoints' replicas) of the tenants
    `tenant_ids` (None: every tenant) hold now, besides jobs: {tenant id: {"gpus", "cpus",
    "memory_mb", "replicas"}}, only for tenants that hold something. The replicas run as
    processes on Gantry's own machine (the local backend's node). jobs' holdings
    (`jobs.services.holdings`) add these to what jobs hold; scheduling's admission counts
    them against the tenant's quota and the machine's capacity. Many providers; with
    none, only jobs hold anything."""
    return {}


# --- telemetry asks endpoints: what long-running services ran, for usage reports ----------


@extension_point(provided_by="endpoints (endpoints.usage.service_usage)", many=True)
def service_usage(user, token, tenants, start, end) -> list:
    """The stretches the provider's long-running services (model endpoints' replicas) of
    `tenants` ran that overlap [start, end) (aware datetimes), as far as `user` (with API
    `token`) may see them: dicts of `kind` ("endpoint"), `id` (one per service, to count
    them), `tenant` and `project` (slugs), `user` (the person it counts for, or ""),
    `start`, `end` (None: running now), `replicas` and `gpus` (per replica). telemetry's
    usage reports count replica-hours and GPU-hours from them. Many providers; with none,
    only jobs count."""
    return []


# --- projects, accounts and modelhub ask endpoints: deletes that cascade to endpoints ---------


@extension_point(provided_by="endpoints (endpoints.services.lock_before_cascade)", many=True)
def before_cascade(deleting) -> None:
    """Called inside the transaction that deletes `deleting` (a queryset of tenants,
    projects or registered models), before the delete collects what goes with it: the
    provider locks its rows under them that a background writer adds to meanwhile
    (endpoints: each endpoint's row, under which the gateway's traffic flush writes the
    request log), so that writer waits for the commit and leaves them out instead of
    failing the delete's foreign keys; what else must go when the delete commits (the
    endpoints' replicas) the provider does then. Called by projects.services.delete_project,
    accounts.services.delete_tenant and modelhub.services.delete_model. Many providers;
    with none, nothing is locked."""


# --- jobs asks cluster ----------------------------------------------------------------------


@extension_point(provided_by="cluster (cluster.models.registered_clusters)")
def kubernetes_clusters() -> list:
    """The registered Kubernetes clusters, the default first: objects with `name`,
    `in_cluster`, `kubeconfig`, `context` and `namespace_prefix`
    (jobs.compute.kubernetes.client). Default: none registered (the backend then uses
    $KUBECONFIG or the in-cluster service account)."""
    return []
