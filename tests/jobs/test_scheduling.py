"""The scheduler at work: quotas, borrowing and preemption, gangs, priorities, the queue.

No GPU exists on the machines these tests run on: `GANTRY_LOCAL_FAKE_GPUS` makes the
local backend report four, for admission's bookkeeping only. Most tests call the
admission pass directly and stand in for the executors with the same services they
call; the last one runs real processes.
"""

import json
import math
import textwrap
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.db import connection
from django.urls import reverse

from jobs.compute import reset_backends
from jobs.models import Job, JobScheduling
from jobs.queries import log_lines
from jobs.services.holdings import holdings_by_tenant, tenant_holdings
from jobs.services.ingestion import record_heartbeat, record_worker_status
from jobs.services.launch import device_holder, launch_job
from jobs.services.lifecycle import cancel_job
from jobs.services.submit import submit_job
from jobs.states import transition
from scheduling import admission, tasks
from scheduling.admission import admission_pass
from scheduling.policy.schedule_pass import schedule
from scheduling.services import set_tenant_quota
from tests.jobs.conftest import wait_for, wait_until

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def small_cluster(settings):
    """One machine: 4 (fake) GPUs, 8 CPUs, 16 GiB."""
    settings.GANTRY_LOCAL_FAKE_GPUS = 4
    settings.GANTRY_LOCAL_CPUS = 8
    settings.GANTRY_LOCAL_MEMORY_MB = 16384
    reset_backends()
    yield
    reset_backends()


def submit(user, project, **spec):
    spec.setdefault("command", "python -c pass")
    spec.setdefault("memory_mb", 256)
    return submit_job(user, project, **spec)


def fresh(job):
    return Job.objects.get(pk=job.pk)


def launched(job):
    """Stand in for launch_job and the executor's 'started' report."""
    job = fresh(job)
    assert transition(job, "starting", "starting (test)")
    assert transition(job, "running", "running (test)")
    return job


def exited(job, outcome="cancelled"):
    """The executor's 'exited' report for every worker."""
    for rank in range(job.workers):
        record_worker_status(
            job, rank, {"event": "exited", "outcome": outcome, "exit_code": 143, "reason": outcome}
        )
    return fresh(job)


def gpus_of(job):
    return sorted(i for ids in fresh(job).placement["gpus"].values() for i in ids)


def test_a_tenant_at_its_quota_waits_while_another_tenants_job_starts(
    owner, outsider, tenant, other_tenant, project, other_project
):
    set_tenant_quota(actor=owner, tenant=tenant, guaranteed_gpus=2, borrow_limit_gpus=0)
    set_tenant_quota(actor=outsider, tenant=other_tenant, guaranteed_gpus=2, borrow_limit_gpus=0)
    first = submit(owner, project, gpus=2)
    assert admission_pass() == [first]
    second = submit(owner, project, gpus=1)
    theirs = submit(outsider, other_project, gpus=1)

    assert admission_pass() == [theirs]
    second = fresh(second)
    assert second.state == "queued"
    assert second.state_reason.startswith(
        "waiting for 1 GPU; tenant lab-a uses 2 of its 2 guaranteed GPUs and nothing can be "
        "borrowed"
    )
    assert second.queue_position == 1
    assert set(gpus_of(first)).isdisjoint(gpus_of(theirs))


def test_idle_capacity_is_borrowed_then_reclaimed_and_the_borrower_is_requeued(
    owner, outsider, tenant, other_tenant, project, other_project
):
    set_tenant_quota(actor=owner, tenant=tenant, guaranteed_gpus=2, borrow_limit_gpus=2)
    set_tenant_quota(actor=outsider, tenant=other_tenant, guaranteed_gpus=2, borrow_limit_gpus=0)
    borrower = submit(owner, project, gpus=4, priority=3)
    assert admission_pass() == [borrower]
    assert "borrowed beyond lab-a's guarantee" in fresh(borrower).state_reason
    borrower = launched(borrower)

    owner_job = submit(outsider, other_project, gpus=2)
    assert admission_pass() == [owner_job]
    borrower = fresh(borrower)
    assert borrower.state == "running" and borrower.preempt_requested_at is not None
    assert borrower.state_reason == (
        f"preempted for job #{owner_job.pk} of lab-b (borrowed capacity reclaimed); stopping"
    )
    # The owner's job has the borrower's GPUs, but starts only once the borrower stopped.
    assert set(gpus_of(owner_job)) <= {0, 1, 2, 3}
    assert not launch_job(fresh(owner_job))
    assert f"job #{borrower.pk} has stopped" in fresh(owner_job).state_reason
    assert record_heartbeat(borrower, 0) is True  # the executor is told to stop

    borrower = exited(borrower)
    assert borrower.state == "queued" and borrower.preemptions == 1
    last = borrower.events.last()
    assert (last.from_state, last.to_state) == ("running", "queued")
    assert last.reason == (
        f"preempted for job #{owner_job.pk} of lab-b (borrowed capacity reclaimed); "
        "requeued (preemption 1)"
    )
    assert device_holder(fresh(owner_job)) is None
    assert not borrower.events.filter(to_state="failed").exists()

    admission_pass()
    borrower = fresh(borrower)
    assert borrower.state == "queued" and borrower.queue_position == 1
    assert borrower.state_reason.startswith("waiting for 4 GPUs; 2 free in the cluster")


def test_a_gang_starts_whole_or_not_at_all_and_small_jobs_do_not_delay_it(owner, project):
    first = submit(owner, project, gpus=2)
    assert admission_pass() == [first]
    gang = submit(owner, project, kind="distributed", workers=3, gpus=1)
    small = submit(owner, project, gpus=1)
    second_small = submit(owner, project, gpus=1)

    # One GPU is left beside the gang's reservation: the first small job takes it, the
    # second would hold a GPU the gang needs for as long as it likes, so it waits.
    assert admission_pass() == [small]
    gang, second_small = fresh(gang), fresh(second_small)
    assert gang.state == "queued" and gang.placement == {}
    assert gang.state_reason.startswith("waiting for 3 GPUs")
    assert gang.queue_position == 1
    assert second_small.state_reason.startswith("held for the 3-GPU job ahead of it")

    transition(fresh(first), "cancelled", "done (test)")
    assert admission_pass() == [gang]
    gang = fresh(gang)
    assert sorted(gang.placement["gpus"]) == ["0", "1", "2"]
    assert len(set(gpus_of(gang))) == 3 and set(gpus_of(gang)).isdisjoint(gpus_of(small))


def test_higher_priority_goes_first(owner, project):
    blocker = submit(owner, project, gpus=4, priority=10)
    assert admission_pass() == [blocker]
    low = submit(owner, project, gpus=4, priority=0)
    high = submit(owner, project, gpus=4, priority=5)
    admission_pass()
    assert (fresh(high).queue_position, fresh(low).queue_position) == (1, 2)

    transition(fresh(blocker), "cancelled", "done (test)")
    assert admission_pass() == [high]
    assert fresh(low).state == "queued"


def test_a_higher_priority_job_preempts_a_lower_one_of_the_same_tenant(owner, project):
    low = submit(owner, project, gpus=4, priority=0)
    assert admission_pass() == [low]
    low = launched(low)
    high = submit(owner, project, gpus=2, priority=5)
    assert admission_pass() == [high]
    assert (
        fresh(low).state_reason
        == f"preempted for higher-priority job #{high.pk} of lab-a; stopping"
    )


def test_a_job_preempted_before_it_launched_is_requeued_at_once(
    owner, outsider, tenant, other_tenant, project, other_project
):
    set_tenant_quota(actor=outsider, tenant=other_tenant, guaranteed_gpus=4, borrow_limit_gpus=0)
    best_effort = submit(owner, project, gpus=4)  # lab-a has no quota: best effort
    assert admission_pass() == [best_effort]
    owner_job = submit(outsider, other_project, gpus=4)
    assert admission_pass() == [owner_job]
    best_effort = fresh(best_effort)
    assert best_effort.state == "queued" and best_effort.preemptions == 1
    assert best_effort.placement == {}


def test_a_job_larger_than_the_cluster_is_refused_at_submit(owner, project, api_for):
    with pytest.raises(ValidationError) as error:
        submit(owner, project, gpus=8)
    assert error.value.message_dict["gpus"] == [
        "Asks for 8 GPU(s), but there are only 4 on this machine: it can never run as submitted."
    ]
    response = api_for(owner).post(
        "/api/v1/jobs/",
        {
            "project": project.pk,
            "command": "python x.py",
            "gpus": 2,
            "workers": 3,
            "kind": "distributed",
        },
        format="json",
    )
    assert response.status_code == 400, response.content
    assert "it can never run as submitted" in str(response.json())
    assert not Job.objects.exists()


def test_a_job_larger_than_the_tenants_quota_is_refused_at_submit(owner, tenant, project):
    set_tenant_quota(actor=owner, tenant=tenant, guaranteed_gpus=1, borrow_limit_gpus=1)
    with pytest.raises(ValidationError) as error:
        submit(owner, project, gpus=3)
    assert error.value.message_dict["gpus"] == [
        "needs 3 GPUs but tenant lab-a may use at most 2 (1 guaranteed + 1 borrowable); "
        "reduce the job or ask for a larger quota — it can never run as submitted"
    ]


def test_a_queued_job_whose_quota_shrank_says_it_can_never_run(owner, tenant, project):
    job = submit(owner, project, gpus=3)
    set_tenant_quota(actor=owner, tenant=tenant, guaranteed_gpus=2, borrow_limit_gpus=0)
    assert admission_pass() == []
    job = fresh(job)
    assert job.state == "queued"
    assert job.state_reason.endswith("— it can never run as submitted")


def test_a_pass_rewrites_only_the_waiting_jobs_whose_place_changed(owner, project):
    blocker = submit(owner, project, gpus=4)
    assert admission_pass() == [blocker]
    first, second, third, fourth = [submit(owner, project, gpus=4) for _ in range(4)]
    admission_pass()
    assert [fresh(j).queue_position for j in (first, second, third, fourth)] == [1, 2, 3, 4]

    cancel_job(owner, fresh(second))
    assert not JobScheduling.objects.filter(job=second).exists()  # left the queue
    jobs_written = []  # the job of every row the pass writes

    def record(execute, sql, params, many, context):
        if many and "jobs_jobscheduling" in sql:  # (position, eta, job id, state)
            jobs_written.extend(row[2] for row in params)
        elif many and sql.startswith("UPDATE"):  # the reasons: (reason, job id, state)
            jobs_written.extend(row[1] for row in params)
        elif sql.startswith(("UPDATE", "INSERT", "DELETE")):
            jobs_written.append(sql)  # nothing else may be written
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        assert admission_pass() == []
    assert [fresh(j).queue_position for j in (first, third, fourth)] == [1, 2, 3]
    # third and fourth moved up (their scheduling rows); first is where it was
    assert sorted(jobs_written) == [third.pk, fourth.pk]
    assert fresh(fourth).state_reason == fresh(third).state_reason != ""

    with connection.execute_wrapper(record):
        admission_pass()
    assert len(jobs_written) == 2  # nothing changed, nothing written


def test_the_head_of_the_queue_gets_an_estimated_start_from_running_jobs_timeouts(
    owner, project
):
    blocker = submit(owner, project, gpus=4, timeout_seconds=3600)
    assert admission_pass() == [blocker]
    head = submit(owner, project, gpus=2)
    admission_pass()
    head, blocker = fresh(head), fresh(blocker)
    expected = blocker.admitted_at + timedelta(seconds=3600)
    assert abs((head.estimated_start_at - expected).total_seconds()) < 1
    assert head.state_reason == (
        "waiting for 2 GPUs; 0 free in the cluster; tenant lab-a has no guaranteed GPUs, "
        "uses 4, and no idle capacity is left to borrow; next in line, reserved start in ~60 min"
    )


def test_a_job_that_waits_for_cpus_says_so_in_cpus(owner, project):
    big = submit(owner, project, cpus=8)
    assert admission_pass() == [big]
    small = submit(owner, project, cpus=2)
    admission_pass()
    assert fresh(small).state_reason == "waiting for 2 CPUs: 0 free on this machine"


def test_the_queue_page_shows_position_and_reason_to_the_tenant_and_404_to_outsiders(
    client_for, owner, member, outsider, tenant, project
):
    blocker = submit(owner, project, gpus=4)
    assert admission_pass() == [blocker]
    waiting = submit(owner, project, gpus=2, timeout_seconds=600)
    admission_pass()
    url = reverse("scheduling:tenant_queue", args=[tenant.pk])

    page = client_for(member).get(url)
    assert page.status_code == 200
    assert [job.pk for job in page.context["objects"]] == [waiting.pk]
    html = page.content.decode()
    assert fresh(waiting).state_reason in html.replace("&#x27;", "'")
    assert "waiting for 2 GPUs" in html
    assert '<td class="text-end fw-semibold">1</td>' in html

    assert client_for(outsider).get(url).status_code == 404
    everything = client_for(outsider).get(reverse("scheduling:queue"))
    assert list(everything.context["objects"]) == []
    assert blocker.pk  # admitted, so not on the queue


def test_the_job_list_and_page_show_the_queue_position(client_for, owner, project):
    submit(owner, project, gpus=4)
    waiting = submit(owner, project, gpus=4)
    admission_pass()
    listing = client_for(owner).get(reverse("jobs:job_list")).content.decode()
    assert "position 1" in listing
    detail = client_for(owner).get(waiting.get_absolute_url()).content.decode()
    assert "position 1" in detail and "no start estimate" in detail


# --- real processes ------------------------------------------------------------------------


@pytest.mark.slow
def test_a_preempted_job_checkpoints_requeues_and_then_runs_to_success(
    running_jobs, owner, project, tmp_path, settings
):
    settings.GANTRY_LOCAL_FAKE_GPUS = 0
    train = tmp_path / "train.py"
    train.write_text(
        textwrap.dedent(
            """
            import os, signal, sys, time
            from executor import preemption_requested
            if os.path.exists("checkpoint"):
                print("resumed from checkpoint")
                sys.exit(0)
            signal.signal(signal.SIGTERM, lambda *args: None)  # checkpoint, then exit
            print("training", flush=True)
            while not preemption_requested():
                time.sleep(0.1)
            with open("checkpoint", "w") as fh:
                fh.write("step 42")
            """
        )
    )
    low = submit(owner, project, command=f"python {train}", cpus=4, priority=0)
    wait_for(low, "running")
    # Preempt only once its SIGTERM handler is set (a sandboxed start takes a moment).
    wait_until(lambda: any(ln["text"] == "training" for ln in log_lines(low)), what="training")
    high = submit(owner, project, command="python -c pass", cpus=4, priority=5)
    tasks.admit_and_launch()
    low.refresh_from_db()
    assert low.preempt_requested_at is not None

    wait_for(high, "succeeded")
    wait_for(low, "succeeded")
    assert low.preemptions == 1 and low.attempt == 1
    states = [e.to_state for e in low.events.all() if e.from_state != e.to_state]
    assert states == [
        "queued",
        "admitted",
        "starting",
        "running",
        "queued",
        "admitted",
        "starting",
        "running",
        "succeeded",
    ]
    requeue = low.events.get(from_state="running", to_state="queued")
    assert requeue.reason.startswith(f"preempted for higher-priority job #{high.pk} of lab-a")


def test_usage_counts_what_active_jobs_hold(owner, project, tenant):
    running = submit(owner, project, gpus=2, cpus=2, memory_mb=1000)
    admission_pass()
    submit(owner, project, gpus=4)
    usage = tenant_holdings(tenant)
    assert usage == {"gpus": 2, "cpus": 2, "memory_mb": 1000, "jobs": 1}
    assert holdings_by_tenant([tenant.pk])[tenant.pk]["queued"] == 1
    assert fresh(running).state == "admitted"


def test_a_pass_weighs_what_each_tenant_received_against_what_it_was_entitled_to(
    owner, outsider, tenant, other_tenant, project, other_project, monkeypatch
):
    # 4 GPUs. lab-a's 2-GPU job waited from 3 h ago and ran from 2.5 h until 1 h ago; the
    # other tenant's 4-GPU job has been queued for 2 h. Entitled (equal weights): lab-a 2
    # GPUs from 3 h to 1 h ago; the other 2 GPUs from 2 h to 1 h ago (the two split the
    # cluster), then all 4. What the pass hands the policy is that, decayed over a day.
    set_tenant_quota(actor=owner, tenant=tenant, guaranteed_gpus=2, borrow_limit_gpus=2)
    set_tenant_quota(actor=outsider, tenant=other_tenant, guaranteed_gpus=2, borrow_limit_gpus=2)
    now = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
    hours = [now - timedelta(hours=h) for h in range(4)]
    done = submit(owner, project, gpus=2)
    Job.objects.filter(pk=done.pk).update(
        state="succeeded", created_at=hours[3], started_at=hours[3] + timedelta(minutes=30),
        finished_at=hours[1])
    waiting = submit(outsider, other_project, gpus=4)
    Job.objects.filter(pk=waiting.pk).update(created_at=hours[2])
    seen = []
    monkeypatch.setattr(admission, "schedule",
                        lambda snap, t, cfg: seen.append(snap) or schedule(snap, t, cfg))

    assert admission_pass(now=now) == [fresh(waiting)]

    w = admission.POLICY.usage_window_s

    def decayed(gpus, since, until):
        return gpus * w * (math.exp(-(now - until).total_seconds() / w)
                           - math.exp(-(now - since).total_seconds() / w))

    a, b = tenant.slug, other_tenant.slug
    assert seen[0].usage_history == {a: pytest.approx(2 * 5_400 * math.exp(-3_600 / w))}
    assert seen[0].entitled_history == {
        a: pytest.approx(decayed(2, hours[3], hours[1])),
        b: pytest.approx(decayed(2, hours[2], hours[1]) + decayed(4, hours[1], now)),
    }


def test_member_sees_other_tenants_only_through_visible_projects(
    owner, outsider, other_project, project, client_for, make_user
):
    admin = make_user("root", is_superuser=True, is_staff=True)
    submit(outsider, other_project, gpus=4)
    mine = submit(owner, project, gpus=4)
    admission_pass()
    assert [j.pk for j in client_for(owner).get(reverse("scheduling:queue")).context["objects"]] == [
        mine.pk
    ]
    assert len(client_for(admin).get(reverse("scheduling:queue")).context["objects"]) == 1


# --- manage.py simulate --------------------------------------------------------------------


def test_simulate_replays_a_trace_through_both_policies(tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text(
        "job_id,submit_time,duration,num_gpus,tenant\n"
        "a,0,100,8,lab-a\nb,1,100,1,lab-b\nc,2,10,1,lab-b\nd,3,50,4,lab-a\n"
    )
    out = StringIO()
    call_command(
        "simulate",
        str(trace),
        "--nodes",
        "1",
        "--out",
        str(tmp_path / "r.json"),
        stdout=out,
        stderr=StringIO(),
    )
    text = out.getvalue()
    assert text.splitlines()[1].startswith("fifo") and text.splitlines()[2].startswith("gantry")
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["gantry"]["completed"] == result["fifo"]["completed"] == 4
    assert result["gantry"]["quota_violations"] == 0


def test_simulate_names_the_bad_line_of_a_malformed_trace(tmp_path):
    trace = tmp_path / "bad.csv"
    trace.write_text("job_id,submit_time,duration,num_gpus\n1,0,soon,1\n")
    with pytest.raises(CommandError, match="line 2, column 'duration': not a number"):
        call_command("simulate", str(trace))
