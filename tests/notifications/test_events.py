"""Which events reach whom: job outcomes, preemption, alerts from the periodic checks,
and only ever jobs the subscription's owner may see."""

from datetime import timedelta

import pytest
from django.utils import timezone

from accounts import services as account_services
from jobs.models import Job
from jobs.services.submit import submit_job
from jobs.signals import job_alert
from notifications import services, tasks
from notifications.models import Delivery, Event
from notifications.receivers import event_of
from scheduling.models import TenantQuota
from tests.notifications.conftest import RUN_TO_END

pytestmark = pytest.mark.django_db


def subscribe(user, **kwargs):
    kwargs.setdefault("channel", "webhook")
    kwargs.setdefault("url", "http://127.0.0.1:9/h")
    kwargs.setdefault("events", list(Event.values))
    return services.create_subscription(user, name="s", **kwargs)[0]


@pytest.mark.parametrize(
    "from_state,to_state,reason,event",
    [
        ("running", "succeeded", "exit code 0", "job.succeeded"),
        ("running", "failed", "exit code 1", "job.failed"),
        ("running", "timed_out", "ran past 60 min", "job.failed"),
        ("running", "lost", "no heartbeat for 30 s", "job.lost"),
        ("running", "queued", "reclaimed; requeued (preemption 2)", "job.preempted"),
        ("running", "queued", "attempt 1 failed (exit 1); retrying, 2 of 3", None),
        ("running", "cancelled", "cancelled by olivia", None),
        ("queued", "admitted", "admitted", None),
    ],
)
def test_which_transitions_are_events(from_state, to_state, reason, event):
    assert event_of(from_state, to_state, reason) == event


def test_only_the_events_asked_for_are_delivered(owner, project, job, queue, move):
    subscribe(owner, project=project, events=["job.failed"])
    move(job, *RUN_TO_END, "succeeded")
    queue.run()
    assert not Delivery.objects.exists()


def test_a_personal_subscription_hears_only_of_its_owners_jobs(
    owner, developer, project, queue, move
):
    mine = subscribe(developer, personal=True)
    theirs = submit_job(owner, project, name="owners", command="python x.py")
    own = submit_job(developer, project, name="devs", command="python y.py")
    move(theirs, *RUN_TO_END, "succeeded")
    move(own, *RUN_TO_END, "succeeded")
    queue.run()
    assert list(Delivery.objects.values_list("subscription", "job")) == [(mine.pk, own.pk)]


def test_a_user_who_lost_access_hears_nothing_more(owner, developer, project, queue, move):
    subscribe(developer, personal=True, project=project)
    job = submit_job(owner, project, name="digits", command="python x.py")
    account_services.TENANT_MEMBERS.remove(
        actor=owner, member=project.tenant.memberships.get(user=developer)
    )
    move(job, *RUN_TO_END, "failed")
    queue.run()
    assert not Delivery.objects.exists()


def test_another_tenants_jobs_never_reach_a_subscription(
    owner, outsider, project, other_project, queue, move
):
    subscribe(owner, project=project)
    subscribe(outsider, personal=True, project=other_project)
    job = submit_job(owner, project, name="digits", command="python x.py")
    move(job, *RUN_TO_END, "failed")
    queue.run()
    assert {d.subscription.project_id for d in Delivery.objects.all()} == {project.pk}


def test_an_outsider_cannot_subscribe_to_a_project_they_cannot_see(outsider, project):
    from django.core.exceptions import PermissionDenied

    with pytest.raises(PermissionDenied):
        subscribe(outsider, personal=True, project=project)
    with pytest.raises(PermissionDenied):
        subscribe(outsider, project=project)


def test_a_job_waiting_past_its_projects_threshold_is_announced_once(owner, project, queue):
    subscribe(owner, project=project, events=["job.waiting_long"])
    services.set_alert_settings(owner, project, waiting_minutes=10)
    job = submit_job(owner, project, name="big", command="python x.py")
    Job.objects.filter(pk=job.pk).update(
        queued_at=timezone.now() - timedelta(minutes=11),
        state_reason="waiting for 1 GPU: lab-a uses its 4 guaranteed GPUs",
    )
    fresh = submit_job(owner, project, name="fresh", command="python x.py")
    assert tasks.check_waiting() == 1
    assert tasks.check_waiting() == 0  # once
    queue.run()
    (row,) = Delivery.objects.all()
    assert row.job_id == job.pk != fresh.pk and row.event == "job.waiting_long"
    assert row.message == (
        "queued for over 10 min: waiting for 1 GPU: lab-a uses its 4 guaranteed GPUs"
    )


def test_a_tenant_near_its_gpu_quota_hears_of_it_once(owner, project, queue):
    subscribe(owner, project=project, events=["quota.nearly_full"])
    TenantQuota.objects.create(tenant=project.tenant, guaranteed_gpus=2, borrow_limit_gpus=0)
    job = submit_job(owner, project, name="big", command="python x.py")
    Job.objects.filter(pk=job.pk).update(gpus=2)  # (this machine has no GPU to submit for)
    assert tasks.check_quotas() == 0  # queued jobs use nothing
    Job.objects.filter(pk=job.pk).update(state="running")
    assert tasks.check_quotas() == 1
    assert tasks.check_quotas() == 0
    queue.run()
    assert Delivery.objects.get().message == "2 of 2 GPUs of Lab A in use"
    Job.objects.filter(pk=job.pk).update(state="succeeded")
    assert tasks.check_quotas() == 0  # fell back: the next crossing is news again
    Job.objects.filter(pk=job.pk).update(state="running")
    assert tasks.check_quotas() == 1


def test_an_idle_warning_from_telemetry_is_delivered(owner, project, job, queue):
    subscribe(owner, project=project, events=["job.idle_warning"])
    job_alert.send(sender=None, job=job, kind="idle_warning", message="idle for 110 min")
    job_alert.send(sender=None, job=job, kind="checkpoint_saved", message="step 10")
    queue.run()
    assert list(Delivery.objects.values_list("event", "message")) == [
        ("job.idle_warning", "idle for 110 min")
    ]


def test_a_paused_subscription_sends_nothing(owner, project, job, queue, move):
    s = subscribe(owner, project=project)
    services.update_subscription(owner, s, active=False)
    move(job, *RUN_TO_END, "failed")
    queue.run()
    assert not Delivery.objects.exists()


def test_old_deliveries_leave_the_log_but_pending_ones_stay(owner, project, job, queue, move):
    subscribe(owner, project=project, events=["job.failed"])
    move(job, *RUN_TO_END, "failed")
    queue.run()  # nothing listens on port 9: pending, to be retried
    row = Delivery.objects.get()
    Delivery.objects.filter(pk=row.pk).update(created_at=timezone.now() - timedelta(days=40))
    assert tasks.forget_old() == 0
    Delivery.objects.filter(pk=row.pk).update(state="failing")
    assert tasks.forget_old() == 1 and not Delivery.objects.exists()
