"""django-q's recurring tasks, declared by each app and written at migrate time."""


def register_minute_schedules(schedules: dict[str, tuple[str, int]]) -> None:
    """Create or update one Schedule row per `name: (dotted task, every N minutes)`.

    Idempotent, so apps call it from a post_migrate handler: a changed interval or task
    name replaces the row's, and nothing is scheduled twice.
    """
    from django_q.models import Schedule

    for name, (func, minutes) in schedules.items():
        Schedule.objects.update_or_create(
            name=name,
            defaults={
                "func": func,
                "schedule_type": Schedule.MINUTES,
                "minutes": minutes,
                "repeats": -1,
            },
        )
