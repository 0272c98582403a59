"""GPU utilization on the job list, job and cluster pages (two queries a page)."""

from django import template

from jobs.models import Job
from jobs.states import JobState
from telemetry.models import IdlePolicy, IdleWatch
from telemetry.services import job_utilization, rule_for

register = template.Library()


@register.simple_tag
def gpu_utilization(rows):
    """{job id: {"current", "average"}} for the rows of a job list (dicts or jobs)."""
    pks = [row["pk"] if isinstance(row, dict) else row.pk for row in rows]
    return job_utilization(pks)


@register.simple_tag
def gpu_cell(stats, pk):
    """ "GPU 37% now · 52% avg" for one job of the list, or "" without samples."""
    found = (stats or {}).get(pk) or {}
    parts = []
    if found.get("current") is not None:
        parts.append(f"{found['current']:.0f}% now")
    if found.get("average") is not None:
        parts.append(f"{found['average']:.0f}% avg")
    return f"GPU {' · '.join(parts)}" if parts else ""


@register.simple_tag
def job_gpu(job):
    """What the job page's GPU panel shows: the idle warning, the policy, the averages."""
    watch = IdleWatch.objects.filter(job=job).first()
    policy = IdlePolicy.objects.filter(project_id=job.project_id).first()
    return {
        "watch": watch,
        "rule": rule_for(policy),
        "stats": job_utilization([job.pk])[job.pk],
        "live": job.state == JobState.RUNNING,
    }


@register.inclusion_tag("telemetry/_cluster_gpu_jobs.html", takes_context=True)
def running_gpu_jobs(context):
    """The running GPU jobs the reader may see, with their current and average use."""
    user = context["request"].user
    jobs = list(
        Job.objects.visible_to(user)
        .filter(state=JobState.RUNNING, gpus__gt=0)
        .select_related("project__tenant", "created_by")
        .order_by("pk")[:200]
    )
    stats = job_utilization([j.pk for j in jobs])
    return {"jobs": [(job, stats[job.pk]) for job in jobs]}
