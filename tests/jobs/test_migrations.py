"""Issue 43 moved rows between tables; the migrations keep what was there (both ways).

Run against the real schema: the database is migrated back to before the move, rows are
written as the old code wrote them, and migrated forward again.
"""

from datetime import UTC, datetime

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("jobs", "0010_alter_job_code_snapshot")]


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    executor.loader.build_graph()
    return executor.loader.project_state(targets).apps


def latest():
    executor = MigrationExecutor(connection)
    return executor.loader.graph.leaf_nodes()


@pytest.mark.django_db(transaction=True)
def test_queue_places_and_notebook_tickets_survive_the_move():
    old = migrate(BEFORE)
    Tenant = old.get_model("accounts", "Tenant")
    Project = old.get_model("projects", "Project")
    Job = old.get_model("jobs", "Job")
    tenant = Tenant.objects.create(name="Lab", slug="lab")
    project = Project.objects.create(tenant=tenant, name="P", slug="p")
    eta = datetime(2026, 12, 5, 9, 30, tzinfo=UTC)
    waiting = Job.objects.create(project=project, name="waiting", queue_position=7, estimated_start_at=eta)
    unplaced = Job.objects.create(project=project, name="unplaced")
    old.get_model("jobs", "NotebookTicket").objects.create(nonce="n-1")

    new = migrate(latest())
    JobScheduling = new.get_model("jobs", "JobScheduling")
    assert list(JobScheduling.objects.values_list("job_id", "queue_position", "estimated_start_at")) == [
        (waiting.pk, 7, eta)
    ]
    assert not JobScheduling.objects.filter(job_id=unplaced.pk).exists()
    assert list(new.get_model("interactive", "NotebookTicket").objects.values_list("nonce", flat=True)) == ["n-1"]

    back = migrate(BEFORE)
    assert back.get_model("jobs", "Job").objects.get(pk=waiting.pk).queue_position == 7
    assert list(back.get_model("jobs", "NotebookTicket").objects.values_list("nonce", flat=True)) == ["n-1"]
    migrate(latest())
