"""Committed changes to what an API job list shows make its cached answers stale
(core.listcache): jobs themselves (JobQuerySet covers the writes that skip these
signals), the image records and images the list names, and the creators' usernames."""

from django.contrib.auth import get_user_model
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from core import listcache
from images.models import JobImage, RuntimeImage
from jobs.models import Job


@receiver([post_save, post_delete], sender=Job)
@receiver([post_save, post_delete], sender=JobImage)
@receiver(post_delete, sender=RuntimeImage)  # its job records' image becomes null
def job_list_changed(sender, **kwargs):
    listcache.changed("jobs")


@receiver(post_save, sender=get_user_model())
def username_may_have_changed(sender, update_fields=None, **kwargs):
    if update_fields is None or "username" in update_fields:
        listcache.changed("jobs")
