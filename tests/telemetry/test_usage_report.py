"""Usage reports: a day of recorded GPU jobs, checked against GPU-hours computed by hand,
in the page, the CSV and the API; and what each reader may see of them.

The jobs' timelines are written as rows with the times they would have had (the state
machine stamps the present); their GPU samples go through the real ingestion
(`ingest_metrics`, what the executor's batches reach) and the minute's roll-up."""

from __future__ import annotations

import csv
import io
from datetime import UTC, date, datetime, timedelta

import pytest
from django.urls import reverse

from jobs.models import Job, JobEvent, JobWorker
from jobs.services.ingestion import ingest_metrics
from telemetry.services import refresh_usage
from telemetry.usage import build_report, held_stretches, seconds_by_day

D = date(2026, 3, 2)  # a Monday
NEXT = D + timedelta(days=1)


def at(day: date, hhmm: str) -> datetime:
    h, m = (int(x) for x in hhmm.split(":"))
    return datetime(day.year, day.month, day.day, h, m, tzinfo=UTC)


def record_job(project, user, gpus, timeline, samples=(), workers=1, name="job"):
    """A finished job with `timeline` [(state, time)] and utilization `samples`
    [(time, [percent per GPU])] ingested as the executor sends them."""
    job = Job.objects.create(
        project=project,
        created_by=user,
        name=name,
        gpus=gpus,
        workers=workers,
        state=timeline[-1][0],
        created_at=timeline[0][1],
        admitted_at=next(t for s, t in timeline if s == "admitted"),
        finished_at=timeline[-1][1],
    )
    previous = ""
    for state, when in timeline:
        JobEvent.objects.create(job=job, from_state=previous, to_state=state, at=when)
        previous = state
    JobWorker.objects.create(job=job, rank=0)
    seq = 0
    items = []
    for when, percents in samples:
        for gpu, percent in enumerate(percents):
            seq += 1
            items.append(
                {
                    "seq": seq,
                    "name": f"gpu{gpu}/utilization",
                    "value": percent,
                    "ts": when.timestamp(),
                }
            )
    if items:
        ingest_metrics(job, 0, items)
    return job


def run(day, start, end, outcome="succeeded"):
    return [
        ("queued", at(day, start) - timedelta(minutes=5)),
        ("admitted", at(day, start)),
        ("starting", at(day, start) + timedelta(seconds=10)),
        ("running", at(day, start) + timedelta(seconds=30)),
        (outcome, end),
    ]


@pytest.fixture
def recorded_day(project, other_project, owner, member, outsider):
    """Hand-computed (GPU-seconds):
    j1 owner, 2 GPUs, 10:00-12:00: 2 x 7200 = 14400 allocated; samples gpu0 50,50,50,50 and
       gpu1 100,100,0,0: mean 50% -> 7200 used.
    j2 member, 1 GPU, 23:00-01:30 next day: 3600 on D (samples 30,30,30 -> 1080 used) and
       5400 on D+1 (samples 90,60 -> 75% -> 4050 used).
    j3 member, 1 GPU, 14:00-14:30, no samples: 1800 allocated, unmeasured.
    j4 owner, 1 GPU, preempted: held 15:00-15:30 then 16:00-16:15 = 2700; samples 20,20 -> 540.
    Another tenant's 4-GPU job and a CPU job never count for lab-a."""
    j1 = record_job(
        project,
        owner,
        2,
        run(D, "10:00", at(D, "12:00")),
        [(at(D, "10:30") + timedelta(minutes=i), [50, 100 if i < 2 else 0]) for i in range(4)],
        name="j1",
    )
    j2 = record_job(
        project,
        member,
        1,
        run(D, "23:00", at(NEXT, "01:30")),
        [
            (at(D, "23:10"), [30]),
            (at(D, "23:20"), [30]),
            (at(D, "23:30"), [30]),
            (at(NEXT, "00:10"), [90]),
            (at(NEXT, "01:00"), [60]),
        ],
        name="j2",
    )
    j3 = record_job(project, member, 1, run(D, "14:00", at(D, "14:30")), name="j3")
    j4 = record_job(
        project,
        owner,
        1,
        [
            ("queued", at(D, "14:55")),
            ("admitted", at(D, "15:00")),
            ("running", at(D, "15:01")),
            ("queued", at(D, "15:30")),
            ("admitted", at(D, "16:00")),
            ("running", at(D, "16:01")),
            ("failed", at(D, "16:15")),
        ],
        [(at(D, "15:10"), [20]), (at(D, "16:05"), [20])],
        name="j4",
    )
    record_job(
        other_project,
        outsider,
        4,
        run(D, "08:00", at(D, "10:00")),
        [(at(D, "09:00"), [100, 100, 100, 100])],
        name="theirs",
    )
    record_job(project, owner, 0, run(D, "09:00", at(D, "11:00")), name="cpu")
    ids = [j.pk for j in Job.objects.all()]
    refresh_usage(at(NEXT, "12:00"), job_ids=ids, since=at(D, "00:00"))
    return {"j1": j1, "j2": j2, "j3": j3, "j4": j4}


def test_seconds_are_split_at_utc_midnight():
    assert seconds_by_day(at(D, "23:00"), at(NEXT, "01:30")) == {D: 3600, NEXT: 5400}


@pytest.mark.django_db
def test_held_stretches_follow_the_timeline_through_a_preemption(recorded_day):
    events = recorded_day["j4"].events.order_by("at")
    assert held_stretches(events, at(NEXT, "00:00")) == [
        (at(D, "15:00"), at(D, "15:30")),
        (at(D, "16:00"), at(D, "16:15")),
    ]


@pytest.mark.django_db
def test_report_by_user_and_day_matches_the_hand_computed_gpu_seconds(recorded_day):
    rows = build_report(
        Job.objects.all().filter(project__tenant__slug="lab-a"), D, NEXT, group="user", period="day"
    )
    got = {(r.period, r.key[2]): (r.allocated, r.used, r.unmeasured) for r in rows}
    assert got == {
        (D, "olivia"): (14400 + 2700, 7200 + 540, 0),
        (D, "max"): (3600 + 1800, 1080, 1800),
        (NEXT, "max"): (5400, 4050, 0),
    }


@pytest.mark.django_db
def test_owner_reads_the_same_gpu_hours_in_page_csv_and_api(recorded_day, client, owner, api_for):
    query = {"group": "project", "period": "day", "start": D.isoformat(), "end": NEXT.isoformat()}
    client.force_login(owner)
    page = client.get(reverse("telemetry:usage_report"), query)
    assert page.status_code == 200
    html = page.content.decode()
    # D: 22500 s = 6.2500 h allocated, 8820 s = 2.4500 h used; D+1: 1.5000 h and 1.1250 h.
    assert 'data-seconds="22500">6.2500<' in html and 'data-seconds="8820">2.4500<' in html
    assert 'data-seconds="5400">1.5000<' in html and 'data-seconds="4050">1.1250<' in html
    assert 'id="total-allocated">7.7500<' in html and 'id="total-used">3.5750<' in html
    assert "theirs" not in html and "lab-b" not in html

    csv_response = client.get(reverse("telemetry:usage_report"), {**query, "export": "csv"})
    assert csv_response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(csv_response.content.decode())))
    assert [
        (
            r["period"],
            r["project"],
            r["allocated_gpu_seconds"],
            r["used_gpu_seconds"],
            r["unmeasured_gpu_seconds"],
            r["allocated_gpu_hours"],
            r["used_gpu_hours"],
        )
        for r in rows
    ] == [
        ("2026-03-02", "lab-a/vision", "22500", "8820", "1800", "6.2500", "2.4500"),
        ("2026-03-03", "lab-a/vision", "5400", "4050", "0", "1.5000", "1.1250"),
    ]

    api = api_for(owner).get("/api/v1/gpu-usage/", {**query, "period": "week"})
    assert api.status_code == 200, api.content
    body = api.json()
    assert [
        (r["period"], r["allocated_gpu_seconds"], r["used_gpu_seconds"], r["used_gpu_hours"])
        for r in body["rows"]
    ] == [("2026-03-02", 27900, 12870, "3.5750")]
    assert body["totals"]["allocated_gpu_hours"] == "7.7500"
    assert body["totals"]["jobs"] == 4


@pytest.mark.django_db
def test_a_member_who_owns_no_tenant_reads_no_usage(recorded_day, client, member, api_for):
    api = api_for(member).get(
        "/api/v1/gpu-usage/", {"start": D.isoformat(), "end": NEXT.isoformat()}
    )
    assert api.status_code == 200
    assert api.json()["rows"] == [] and api.json()["totals"]["allocated_gpu_seconds"] == 0


@pytest.mark.django_db
def test_another_tenants_usage_is_out_of_reach(recorded_day, client, owner, outsider, api_for):
    from accounts.models import Tenant

    lab_b = Tenant.objects.get(slug="lab-b")
    query = {"tenant": lab_b.pk, "start": D.isoformat(), "end": NEXT.isoformat()}
    refused = api_for(owner).get("/api/v1/gpu-usage/", query)
    assert refused.status_code == 400 and "tenant" in refused.json()["errors"]
    theirs = api_for(outsider).get("/api/v1/gpu-usage/", query)
    assert [r["allocated_gpu_seconds"] for r in theirs.json()["rows"]] == [4 * 7200]


@pytest.mark.django_db
def test_bad_report_dates_say_so_and_change_nothing(client, owner, tenant):
    client.force_login(owner)
    response = client.get(
        reverse("telemetry:usage_report"), {"start": "2026-03-05", "end": "2026-03-01"}
    )
    assert response.status_code == 400
    assert "must end on or after its first day" in response.content.decode()
