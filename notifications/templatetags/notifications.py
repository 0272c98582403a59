from django import template

from notifications.models import Delivery

register = template.Library()


@register.simple_tag
def job_deliveries(job, user, limit=20):
    """Who was told what of this job: the deliveries to subscriptions the user may see
    (their own, and those of projects they maintain), newest first."""
    rows = Delivery.objects.visible_to(user).filter(job=job).select_related("subscription")
    return list(rows.order_by("-pk")[:limit])
