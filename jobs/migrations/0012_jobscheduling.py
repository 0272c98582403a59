# The scheduler's view of a queued job (position, estimated start) moves from Job's row to
# a JobScheduling row one-to-one with it (issue 43); the values are copied both ways.

import django.db.models.deletion
from django.db import migrations, models


def to_rows(apps, schema_editor):
    Job = apps.get_model("jobs", "Job")
    JobScheduling = apps.get_model("jobs", "JobScheduling")
    placed = Job.objects.exclude(queue_position__isnull=True, estimated_start_at__isnull=True)
    rows = placed.values_list("pk", "queue_position", "estimated_start_at").iterator()
    batch = []
    for pk, position, eta in rows:
        batch.append(JobScheduling(job_id=pk, queue_position=position, estimated_start_at=eta))
        if len(batch) == 1000:
            JobScheduling.objects.bulk_create(batch)
            batch = []
    JobScheduling.objects.bulk_create(batch)


def to_columns(apps, schema_editor):
    Job = apps.get_model("jobs", "Job")
    JobScheduling = apps.get_model("jobs", "JobScheduling")
    for row in JobScheduling.objects.iterator():
        Job.objects.filter(pk=row.job_id).update(
            queue_position=row.queue_position, estimated_start_at=row.estimated_start_at
        )


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0011_notebookticket_to_interactive"),
    ]

    operations = [
        migrations.CreateModel(
            name="JobScheduling",
            fields=[
                (
                    "job",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="scheduling",
                        serialize=False,
                        to="jobs.job",
                    ),
                ),
                ("queue_position", models.PositiveIntegerField(blank=True, null=True)),
                ("estimated_start_at", models.DateTimeField(blank=True, null=True)),
            ],
            options={"verbose_name_plural": "job scheduling"},
        ),
        migrations.RunPython(to_rows, to_columns),
        migrations.RemoveField(model_name="job", name="queue_position"),
        migrations.RemoveField(model_name="job", name="estimated_start_at"),
    ]
