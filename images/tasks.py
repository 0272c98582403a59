"""Background work for images (django-q2): running custom image builds.

`run_build` is the runner: it claims a queued build, records start, progress,
log, end and error, and leaves the work itself to images.builder.
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone

from images import services
from images.builder import BuildError, build_image
from images.models import BuildState, ImageBuild
from images.registry import RegistryError

logger = logging.getLogger(__name__)
MAX_LOG_CHARS = 200_000


def queue_build(build_id: int) -> None:
    from django_q.tasks import async_task

    try:
        async_task("images.tasks.run_build", build_id, task_name=f"images: build #{build_id}")
    except Exception:  # the broker being down must not break the request
        logger.warning("could not queue image build %s", build_id, exc_info=True)


def run_build(build_id: int) -> str:
    claimed = ImageBuild.objects.filter(pk=build_id, state=BuildState.QUEUED).update(
        state=BuildState.RUNNING, started_at=timezone.now(), step="starting"
    )
    if not claimed:
        return "not queued"
    build = ImageBuild.objects.select_related("base", "tenant").get(pk=build_id)
    lines: list[str] = []

    def log(line: str) -> None:
        lines.append(line)
        text = "\n".join(lines)[-MAX_LOG_CHARS:]
        ImageBuild.objects.filter(pk=build_id).update(log=text)

    def progress(percent: int, step: str) -> None:
        log(f"== {step}")
        ImageBuild.objects.filter(pk=build_id).update(progress=percent, step=step)

    try:
        digest, labels = build_image(build, log, progress)
        with transaction.atomic():
            image = services.record_built_image(build, digest, labels)
            ImageBuild.objects.filter(pk=build_id).update(
                state=BuildState.SUCCEEDED,
                progress=100,
                step="done",
                result=image,
                finished_at=timezone.now(),
            )
        return "succeeded"
    except (BuildError, RegistryError) as exc:
        message = str(exc)
    except Exception as exc:  # the runner owns the state: never leave a build "running"
        logger.exception("image build %s failed", build_id)
        message = f"internal error: {exc.__class__.__name__}: {exc}"
    log(f"FAILED: {message}")
    ImageBuild.objects.filter(pk=build_id).update(
        state=BuildState.FAILED, error=message[:1000], finished_at=timezone.now()
    )
    return "failed"
