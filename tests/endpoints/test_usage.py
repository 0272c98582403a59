"""What endpoints' replicas ran, in the usage report: the intervals the local backend
records as it starts and stops replicas and the minute's pass finds (those that stopped by
themselves: scaled to zero), and the replica-hours and GPU-hours they make in the page,
the CSV and the API, beside the jobs' rows.

Replica processes are real (a Python that sleeps, through local.start; or `sleep` with a
replica's pid file); no model server runs here (test_serving.py's scale-to-zero test
checks the real one). The report's intervals are written as the recording writes them,
with the times they would have had."""

from __future__ import annotations

import csv
import io
import itertools
import sys
import time
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from endpoints import local, services, usage
from endpoints.models import Endpoint, ReplicaInterval
from jobs.compute.local import process_matches
from tests.endpoints.builders import access_objects
from tests.telemetry.test_usage_report import NEXT, D, at, record_job, run

pytestmark = pytest.mark.django_db

PIDS = itertools.count(10_000)


@pytest.fixture
def endpoint(project, owner):
    return access_objects(project, owner)[Endpoint]


@pytest.fixture
def replica_runs(monkeypatch, settings, tmp_path):
    """local.start runs `code` (Python) as the replica's server, unsandboxed."""
    settings.GANTRY_JOBS_DIR = tmp_path / "jobs"
    monkeypatch.setattr(local, "endpoint_uid", lambda pk: local.os.getuid())
    monkeypatch.setattr(local.sandbox, "in_own_cgroup", lambda limits, name, argv: argv)

    def runs(code):
        monkeypatch.setattr(local, "server_argv", lambda *args: [sys.executable, "-c", code])

    return runs


def wait_until(check, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(0.05)


# --- recording ---------------------------------------------------------------------------


def test_a_replica_gantry_starts_and_stops_is_one_interval(endpoint, owner, replica_runs):
    replica_runs("import time; time.sleep(300)")
    version = endpoint.version
    replica = local.Replica(endpoint.pk, version.pk)
    before = timezone.now()
    assert local.start(endpoint, version, replica)

    (interval,) = ReplicaInterval.objects.all()
    assert interval.ended_at is None and before <= interval.started_at <= timezone.now()
    assert (interval.endpoint, interval.endpoint_name, interval.project) == (
        endpoint, "served", endpoint.project
    )  # fmt: skip
    assert (interval.user, interval.version_number, interval.replicas) == (owner, version.number, 1)
    assert process_matches(interval.pid, interval.process_start)

    assert local.stop(replica)
    interval.refresh_from_db()
    assert interval.started_at <= interval.ended_at <= timezone.now()


def test_a_replica_scaled_to_zero_is_closed_by_the_minute_pass_at_its_stop(
    endpoint, replica_runs
):
    # The replica says it stops after its idle second and exits, as the real one does.
    replica_runs("import time; time.sleep(1); print('idle: stopping', flush=True)")
    replica = local.Replica(endpoint.pk, endpoint.version.pk)
    local.start(endpoint, endpoint.version, replica)
    wait_until(lambda: not local.running(replica))

    later = timezone.now() + timedelta(minutes=1)  # the pass comes a while after the stop
    assert local.record_replicas(now=later) == {"running": 0, "opened": 0, "closed": 1}
    interval = ReplicaInterval.objects.get()
    assert timedelta(seconds=0.9) <= interval.ended_at - interval.started_at <= timedelta(seconds=10)
    assert local.record_replicas(now=later)["closed"] == 0  # closed once


def test_the_minute_pass_records_running_replicas_scale_up_included(endpoint, start_replicas):
    # Replicas whose start was not recorded (running before this version of Gantry).
    first = start_replicas(endpoint, 2)
    assert local.record_replicas() == {"running": 2, "opened": 2, "closed": 0}
    assert ReplicaInterval.objects.filter(ended_at=None).count() == 2

    later = timezone.now() + timedelta(minutes=1)
    assert local.record_replicas(now=later) == {"running": 2, "opened": 0, "closed": 0}
    assert set(ReplicaInterval.objects.values_list("seen_at", flat=True)) == {later}

    start_replicas(endpoint, 1, first=2)  # scaled up to three
    one, _ = first.values()
    one.kill()
    one.wait()
    outcome = local.record_replicas(now=later + timedelta(minutes=1))
    assert outcome == {"running": 2, "opened": 1, "closed": 1}
    stopped = ReplicaInterval.objects.exclude(ended_at=None).get()
    assert stopped.replica == f"{endpoint.pk}-{endpoint.version.pk}-0"
    assert later <= stopped.ended_at <= later + timedelta(minutes=1)


def test_no_interval_for_an_endpoint_deleted_before_its_replica_was_recorded(endpoint, owner):
    pk = endpoint.pk
    services.delete_endpoint(owner, endpoint)
    assert usage.opened(pk, f"{pk}-1-0", 1, next(PIDS), 1, timezone.now()) is None
    assert not ReplicaInterval.objects.exists()


# --- the report ----------------------------------------------------------------------------


def ran(endpoint, index, start, end):
    """Replica `index` of the endpoint ran from `start` to `end` (None: runs still)."""
    name = f"{endpoint.pk}-{endpoint.version_id}-{index}"
    interval = usage.opened(endpoint.pk, name, 1, next(PIDS), 1, start)
    if end is not None:
        usage.closed(interval, end)
    return interval


@pytest.fixture
def served_day(endpoint, other_project, owner, outsider):
    """Hand-computed: lab-a/vision's endpoint "served" holds 2 GPUs per replica (as on
    Kubernetes). Its 2 replicas ran 10:00-10:30 on D (2 x 1800 = 3600 replica-seconds,
    7200 GPU-seconds); scaled to zero, then replica 0 ran 23:30-00:45 (D: 1800, D+1: 2700
    replica-seconds; twice that in GPU-seconds). A 1-GPU job ran 10:00-12:00 (7200).
    Another tenant's endpoint ran 10:00-11:00 and never counts for lab-a."""
    Endpoint.objects.filter(pk=endpoint.pk).update(gpus=2, replicas=2, backend="kubernetes")
    ran(endpoint, 0, at(D, "10:00"), at(D, "10:30"))
    ran(endpoint, 1, at(D, "10:00"), at(D, "10:30"))
    ran(endpoint, 0, at(D, "23:30"), at(NEXT, "00:45"))
    record_job(endpoint.project, owner, 1, run(D, "10:00", at(D, "12:00")), name="train")
    theirs = access_objects(other_project, outsider)[Endpoint]
    ran(theirs, 0, at(D, "10:00"), at(D, "11:00"))
    return endpoint


def test_replica_hours_and_gpu_hours_of_an_endpoint_in_page_csv_and_api(
    served_day, client, owner, api_for
):
    query = {"group": "project", "period": "day", "start": D.isoformat(), "end": NEXT.isoformat()}
    client.force_login(owner)
    page = client.get(reverse("telemetry:usage_report"), query)
    assert page.status_code == 200
    html = page.content.decode()
    # D: 5400 replica-seconds = 1.5000 h, 10800 GPU-seconds = 3.0000 h; D+1: 0.75 h, 1.5 h.
    assert 'data-replica-seconds="5400">1.5000<' in html and 'data-seconds="10800">3.0000<' in html
    assert 'data-replica-seconds="2700">0.7500<' in html and 'data-seconds="5400">1.5000<' in html
    assert 'id="total-replica">2.2500<' in html and 'id="total-allocated">6.5000<' in html
    assert "lab-b" not in html

    exported = client.get(reverse("telemetry:usage_report"), {**query, "export": "csv"})
    rows = list(csv.DictReader(io.StringIO(exported.content.decode())))
    columns = ("period", "kind", "project", "jobs", "endpoints", "replica_seconds")
    columns += ("replica_hours", "allocated_gpu_seconds", "used_gpu_seconds")
    columns += ("unmeasured_gpu_seconds",)
    assert [tuple(r[c] for c in columns) for r in rows] == [
        ("2026-03-02", "job", "lab-a/vision", "1", "0", "0", "0.0000", "7200", "0", "7200"),
        ("2026-03-02", "endpoint", "lab-a/vision", "0", "1", "5400", "1.5000", "10800", "0",
         "10800"),
        ("2026-03-03", "endpoint", "lab-a/vision", "0", "1", "2700", "0.7500", "5400", "0",
         "5400"),
    ]  # fmt: skip

    api = api_for(owner).get("/api/v1/gpu-usage/", {**query, "group": "user", "period": "week"})
    assert api.status_code == 200, api.content
    body = api.json()
    assert [
        (r["kind"], r["user"], r["replica_hours"], r["allocated_gpu_hours"]) for r in body["rows"]
    ] == [("job", "olivia", "0.0000", "2.0000"), ("endpoint", "olivia", "2.2500", "4.5000")]
    totals = body["totals"]
    assert (totals["jobs"], totals["endpoints"], totals["replica_seconds"]) == (1, 1, 8100)
    assert totals["allocated_gpu_hours"] == "6.5000" and totals["utilization_percent"] is None


def test_only_the_days_the_replicas_ran_in_count(served_day, owner, api_for):
    api = api_for(owner)
    next_day = api.get("/api/v1/gpu-usage/", {"start": NEXT.isoformat(), "end": NEXT.isoformat()})
    assert [(r["kind"], r["replica_seconds"]) for r in next_day.json()["rows"]] == [
        ("endpoint", 2700)  # 00:00-00:45; what ran on D is left out
    ]
    after = {"start": (NEXT + timedelta(days=1)).isoformat(), "end": "2026-03-10"}
    body = api.get("/api/v1/gpu-usage/", after).json()
    assert body["rows"] == [] and body["totals"]["replica_seconds"] == 0


def test_a_replica_running_now_counts_until_now(endpoint, owner):
    from accounts.models import Tenant
    from jobs.models import Job
    from telemetry.usage import build_report, report_bounds

    ran(endpoint, 0, at(D, "22:00"), None)
    start, end = report_bounds(D, NEXT)
    (served,) = usage.service_usage(owner, None, Tenant.objects.all(), start, end)
    rows = build_report(Job.objects.none(), D, NEXT, services=[served], now=at(NEXT, "01:00"))
    assert [(r.period, r.kind, r.replica) for r in rows] == [
        (D, "endpoint", 7200),
        (NEXT, "endpoint", 3600),
    ]


def test_a_deleted_endpoints_replica_hours_stay_in_its_projects_report(
    served_day, owner, api_for
):
    services.delete_endpoint(owner, served_day)
    query = {"group": "project", "start": D.isoformat(), "end": NEXT.isoformat()}
    body = api_for(owner).get("/api/v1/gpu-usage/", query).json()
    assert body["totals"]["replica_seconds"] == 8100 and body["totals"]["endpoints"] == 1
