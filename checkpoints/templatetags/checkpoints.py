from django import template

from checkpoints.models import Checkpoint

register = template.Library()


@register.simple_tag
def job_checkpoints(job, limit=50):
    """The job's complete checkpoints, newest first (the job page's own access check has
    let the user see the job; pending ones are never shown)."""
    return list(Checkpoint.objects.complete().filter(job=job).order_by("-completed_at", "-pk")[:limit])
