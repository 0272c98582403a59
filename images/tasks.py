"""Background work for images (django-q2): running custom image builds.

`run_build` is the runner: it claims a queued build and reports its progress, log,
end and error through images.services (every write there), leaving the work itself to
images.builder.
"""

from __future__ import annotations

import logging

from images import buildah, builder, services
from images.builder import BuildError
from images.registry import RegistryError

logger = logging.getLogger(__name__)


def queue_build(build_id: int) -> None:
    from django_q.tasks import async_task

    try:
        async_task("images.tasks.run_build", build_id, task_name=f"images: build #{build_id}")
    except Exception:  # the broker being down must not break the request
        logger.warning("could not queue image build %s", build_id, exc_info=True)


def run_build(build_id: int) -> str:
    build = services.claim_build(build_id)
    if build is None:
        return "not queued"
    lines: list[str] = []

    def log(line: str) -> None:
        lines.append(line)
        services.record_build_log(build, "\n".join(lines))

    def progress(percent: int, step: str) -> None:
        log(f"== {step}")
        services.record_build_progress(build, percent, step)

    try:
        engine = buildah if buildah.available() else builder
        log(f"builder: {'buildah' if engine is buildah else 'registry only (one layer)'}")
        digest, labels = engine.build_image(build, log, progress)
        services.finish_build(build, digest, labels)
        return "succeeded"
    except (BuildError, RegistryError) as exc:
        message = str(exc)
    except Exception as exc:  # the runner owns the state: never leave a build "running"
        logger.exception("image build %s failed", build_id)
        message = f"internal error: {exc.__class__.__name__}: {exc}"
    log(f"FAILED: {message}")
    services.fail_build(build, message)
    return "failed"
