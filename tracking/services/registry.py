"""MLflow's model registry on Gantry's model hub (services for tracking/api/registry.py).

A registered model *is* a modelhub RegisteredModel, a version a ModelVersion (its files
copied from the MLflow source into the hub's storage, with the run's parameters,
metrics and job as lineage), an alias a modelhub Alias: a version registered from MLflow
shows in the model hub, and one uploaded in Gantry answers to `MlflowClient`. What the
hub has no room for (MLflow's key/value tags, a version's source URI and run) is kept
here, beside it. Names are bare (`models:/digits/1` must parse): a name means a model of
the caller's project (their token's, their default one, or their only one: access.
home_project), or `tenant/project/name`; never a model of another project.
"""

from __future__ import annotations

import posixpath

from django.core.exceptions import ValidationError
from django.core.files.storage import default_storage
from django.db import transaction

from modelhub import services as hub
from modelhub.models import Alias, ModelVersion, RegisteredModel
from projects.models import Project
from tracking import search
from tracking.errors import MlflowError, invalid, not_found
from tracking.models import LatestMetric, Param, RegistryTag, RegistryVersionSource
from tracking.services.access import Caller, get_run, project_of_caller, split_name
from tracking.services.logged_models import get_logged_model
from tracking.services.validation import integer, listed, tag_pair, text

ARTIFACTS = "mlflow-artifacts"


def _message(exc: ValidationError) -> str:
    if hasattr(exc, "message_dict"):
        return " ".join(f"{m}" for ms in exc.message_dict.values() for m in ms)
    return " ".join(exc.messages)


def _project_and_name(caller: Caller, name) -> tuple[Project, str]:
    name = text(name, "name", 200)
    project, bare = split_name(caller, name)
    if project is None:
        project = project_of_caller(caller, "Registered model", name)
    return project, bare


def get_model(caller: Caller, name, action: str = "model.view") -> RegisteredModel:
    project, bare = _project_and_name(caller, name)
    queryset = RegisteredModel.objects.visible_to(caller.user).select_related("project__tenant")
    found = queryset.filter(project=project, name=bare).first()
    if found is None or not caller.can("model.view", found):
        raise not_found(f"Registered Model with name={name} not found")
    if not caller.can(action, found):
        raise MlflowError(
            f"You may not {action.split('.')[1]} model '{name}'.", "PERMISSION_DENIED"
        )
    return found


def get_version(caller: Caller, name, version, action: str = "model.view") -> ModelVersion:
    model = get_model(caller, name, action)
    number = str(version or "")
    found = (
        ModelVersion.objects.filter(model=model, number=int(number)).first()
        if number.isdigit() and len(number) < 10
        else None
    )
    if found is None:
        raise not_found(f"Model Version (name={name}, version={version}) not found")
    found.model = model
    return found


def create_model(caller: Caller, name, tags=None, description="") -> RegisteredModel:
    project, bare = _project_and_name(caller, name)
    if not caller.can("model.view", project):
        raise not_found(f"The project of model '{name}' does not exist.")
    if not caller.can("model.register", project):
        raise MlflowError("You may not register models in this project.", "PERMISSION_DENIED")
    if RegisteredModel.objects.filter(project=project, name=bare).exists():
        raise MlflowError(
            f"Registered Model (name={bare}) already exists.", "RESOURCE_ALREADY_EXISTS"
        )
    pairs = dict(tag_pair(t) for t in listed(tags, "tags"))
    try:
        with transaction.atomic():
            model = hub.create_model(
                caller.user, project, name=bare, description=(description or "")[:500]
            )
            RegistryTag.objects.bulk_create(
                RegistryTag(model=model, key=k, value=v) for k, v in pairs.items()
            )
    except ValidationError as exc:
        raise invalid(_message(exc)) from None
    return model


def update_model(caller: Caller, name, *, new_name=None, description=None) -> RegisteredModel:
    model = get_model(caller, name, "model.register")
    fields = {}
    if new_name is not None:
        fields["name"] = text(new_name, "new_name", 200)
    if description is not None:
        fields["description"] = str(description)[:500]
    try:
        return hub.update_model(caller.user, model, **fields)
    except ValidationError as exc:
        code = (
            "RESOURCE_ALREADY_EXISTS" if "already" in _message(exc) else "INVALID_PARAMETER_VALUE"
        )
        raise MlflowError(_message(exc), code) from None


def delete_model(caller: Caller, name) -> None:
    hub.delete_model(caller.user, get_model(caller, name, "model.delete"))


def set_tag(caller: Caller, name, key, value, version=None) -> None:
    model = get_model(caller, name, "model.register")
    target = get_version(caller, name, version) if version is not None else None
    key, value = tag_pair({"key": key, "value": value})
    RegistryTag.objects.update_or_create(
        model=model, version=target, key=key, defaults={"value": value}
    )


def delete_tag(caller: Caller, name, key, version=None) -> None:
    model = get_model(caller, name, "model.register")
    target = get_version(caller, name, version) if version is not None else None
    RegistryTag.objects.filter(model=model, version=target, key=key).delete()


def _source_files(caller: Caller, source: str) -> tuple[str, object, object]:
    """(storage folder, run or None, logged model or None) of a version's source URI."""
    if source.startswith("models:/"):
        logged = get_logged_model(caller, source[len("models:/") :].strip("/"))
        return (
            f"{ARTIFACTS}/{logged.experiment_id}/models/{logged.model_id}/artifacts",
            logged.run,
            logged,
        )
    if source.startswith("runs:/"):
        run_id, _, path = source[len("runs:/") :].partition("/")
        run = get_run(caller, run_id)
        return (
            posixpath.join(f"{ARTIFACTS}/{run.experiment_id}/{run.run_id}/artifacts", path),
            run,
            None,
        )
    if source.startswith("mlflow-artifacts:/"):
        path = source[len("mlflow-artifacts:/") :].strip("/")
        parts = path.split("/")
        if len(parts) >= 4 and parts[1] == "models":
            logged = get_logged_model(caller, parts[2])
            return f"{ARTIFACTS}/{path}", logged.run, logged
        if len(parts) >= 3:
            run = get_run(caller, parts[1])
            return f"{ARTIFACTS}/{path}", run, None
    raise invalid(
        f"Unsupported source '{source}': Gantry registers models:/<model id>, runs:/<run>/<path> "
        "and mlflow-artifacts:/ sources."
    )


def _walk(folder: str, prefix: str = "") -> list[str]:
    try:
        dirs, files = default_storage.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = [posixpath.join(prefix, f) for f in files]
    for d in dirs:
        found += _walk(f"{folder}/{d}", posixpath.join(prefix, d))
    return found


def create_version(
    caller: Caller, name, source, run_id=None, tags=None, description="", model_id=None
) -> ModelVersion:
    model = get_model(caller, name, "model.register")
    source = text(source, "source", 1000)
    if model_id and not source.startswith("models:/"):
        source_for_files = f"models:/{model_id}"
    else:
        source_for_files = source
    folder, run, logged = _source_files(caller, source_for_files)
    paths = _walk(folder)
    if not paths:
        raise invalid(f"No files at source '{source}'.")
    if run is not None and run.experiment.project_id != model.project_id:
        raise invalid("A model version comes from a run of the model's own project.")
    pairs = dict(tag_pair(t) for t in listed(tags, "tags"))
    handles = [(p, default_storage.open(f"{folder}/{p}", "rb")) for p in paths]
    try:
        with transaction.atomic():
            version = hub.upload_version(
                caller.user, model, handles, description=(description or "")[:500]
            )
            # Lineage the hub shows for a version from a job: the run's parameters, last
            # metrics, and its job when the run is a job's.
            if run is not None:
                lineage = {
                    "parameters": dict(Param.objects.filter(run=run).values_list("key", "value")),
                    "metrics": {
                        m.key: (None if m.is_nan else m.value)
                        for m in LatestMetric.objects.filter(run=run)
                    },
                    "source_job": run.job,
                }
                ModelVersion.objects.filter(pk=version.pk).update(**lineage)
            RegistryVersionSource.objects.create(
                version=version,
                source=source,
                run_id=(run.run_id if run is not None else str(run_id or ""))[:64],
                model_id=logged.model_id if logged is not None else "",
            )
            RegistryTag.objects.bulk_create(
                RegistryTag(model=model, version=version, key=k, value=v) for k, v in pairs.items()
            )
    except ValidationError as exc:
        raise invalid(_message(exc)) from None
    finally:
        for _, handle in handles:
            handle.close()
    version.model = model
    return version


def update_version(caller: Caller, name, version, description) -> ModelVersion:
    found = get_version(caller, name, version, "model.register")
    ModelVersion.objects.filter(pk=found.pk).update(description=str(description or "")[:500])
    found.description = str(description or "")[:500]
    return found


def set_alias(caller: Caller, name, alias, version) -> None:
    model = get_model(caller, name, "model.alias")
    try:
        hub.set_alias(caller.user, model, alias, get_version(caller, name, version))
    except ValidationError as exc:
        raise invalid(_message(exc)) from None


def delete_alias(caller: Caller, name, alias) -> None:
    model = get_model(caller, name, "model.alias")
    try:
        hub.remove_alias(caller.user, model, alias)
    except ValidationError as exc:
        raise not_found(_message(exc)) from None


def version_by_alias(caller: Caller, name, alias) -> ModelVersion:
    model = get_model(caller, name)
    found = (
        Alias.objects.filter(model=model, name=str(alias or "").lower())
        .select_related("version")
        .first()
    )
    if found is None:
        raise not_found(f"Registered model alias {alias} not found.")
    found.version.model = model
    return found.version


def search_models(caller: Caller, filter_string, max_results, offset):
    queryset = RegisteredModel.objects.visible_to(caller.user).select_related("project__tenant")
    if caller.project_id is not None:
        queryset = queryset.filter(project_id=caller.project_id)
    for clause in search.parse_filter(filter_string, experiments=True):
        if clause.kind == "tag":
            # MLflow 3 clients hide prompts with `tags.mlflow.prompt.is_prompt != 'true'`: a
            # model without the tag passes a !=, as in MLflow.
            tags = RegistryTag.objects.filter(version=None, key=clause.key)
            if clause.op == "!=":
                queryset = queryset.exclude(
                    pk__in=tags.filter(value=clause.value).values("model_id")
                )
                continue
            if clause.op in ("IS NULL", "IS NOT NULL"):
                method = queryset.exclude if clause.op == "IS NULL" else queryset.filter
                queryset = method(pk__in=tags.values("model_id"))
                continue
            matching = tags.filter(search._string_q("value", clause.op, clause.value))
            queryset = queryset.filter(pk__in=matching.values("model_id"))
        elif clause.kind == "attribute" and clause.key == "name":
            queryset = queryset.filter(search._string_q("name", clause.op, clause.value))
        else:
            raise invalid("Registered models are searched by name and tags.")
    limit = integer(max_results, "max_results", default=100, minimum=1)
    page = list(queryset.order_by("name", "pk")[offset : offset + limit + 1])
    return page[:limit], (offset + limit if len(page) > limit else None)


def search_versions(caller: Caller, filter_string, max_results, offset):
    queryset = ModelVersion.objects.visible_to(caller.user).select_related("model__project__tenant")
    if caller.project_id is not None:
        queryset = queryset.filter(model__project_id=caller.project_id)
    for clause in search.parse_filter(filter_string, models=True):
        if (
            clause.kind != "attribute"
            or clause.key not in ("name", "source_run_id")
            and clause.key != "run_id"
        ):
            raise invalid("Model versions are searched by name and run_id.")
        field = "model__name" if clause.key == "name" else "mlflow_source__run_id"
        queryset = queryset.filter(search._string_q(field, clause.op, clause.value))
    limit = integer(max_results, "max_results", default=10000, minimum=1)
    page = list(queryset.order_by("model__name", "-number")[offset : offset + limit + 1])
    return page[:limit], (offset + limit if len(page) > limit else None)
